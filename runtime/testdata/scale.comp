#version 450
// x = x * s + bias, in place, over n floats. bias is specialization constant 1.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const float bias = 0.0;
layout(std430, binding = 0) buffer X { float x[]; };
layout(push_constant) uniform P { uint n; float s; } p;
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < p.n) x[i] = x[i] * p.s + bias;
}
