#version 450
// dst = src over n vec4s; a grid-stride loop so any grid covers any n.
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer S { vec4 src[]; };
layout(std430, binding = 1) writeonly buffer D { vec4 dst[]; };
layout(push_constant) uniform P { uint n; } p;
void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) dst[i] = src[i];
}
