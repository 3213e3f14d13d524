// kvlogits: llama-logits (the peer kit's tools/llama-logits.cpp, reduced) with the KV cache
// types and flash attention chosen on the command line:
//   kvlogits MODEL.gguf TYPE_K TYPE_V FA SPLIT OUT.f32 tok,tok,...
// TYPE: ggml type number (1 f16, 8 q8_0, 2 q4_0). CPU only (no Vulkan device here), 2 threads,
// n_ctx 256, every prefill position's logits, then one llama_decode per token.
// The context-params layout is llama.h's at ggml-org/llama.cpp 0011438e; main() checks the
// defaults it expects at those offsets before relying on them.
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int32_t llama_token;
typedef int32_t llama_pos;
typedef int32_t llama_seq_id;
struct llama_model;
struct llama_context;
struct llama_vocab;

typedef struct llama_batch {
    int32_t n_tokens;
    llama_token *token;
    float *embd;
    llama_pos *pos;
    int32_t *n_seq_id;
    llama_seq_id **seq_id;
    int8_t *logits;
} llama_batch;

struct llama_model_params {
    void *devices;
    const void *tensor_buft_overrides;
    int32_t n_gpu_layers;
    int split_mode;
    int32_t main_gpu;
    const float *tensor_split;
    void *progress_callback;
    void *progress_callback_user_data;
    const void *kv_overrides;
    bool vocab_only, use_mmap, use_direct_io, use_mlock, check_tensors, use_extra_bufts, no_host, no_alloc;
};

struct llama_context_params {
    uint32_t n_ctx, n_batch, n_ubatch, n_seq_max, n_rs_seq, n_outputs_max;
    int32_t n_threads, n_threads_batch;
    int ctx_type, rope_scaling_type, pooling_type, attention_type, flash_attn_type;
    float rope_freq_base, rope_freq_scale, yarn_ext_factor, yarn_attn_factor, yarn_beta_fast, yarn_beta_slow;
    uint32_t yarn_orig_ctx;
    float defrag_thold;
    void *cb_eval;
    void *cb_eval_user_data;
    int type_k, type_v;
    void *abort_callback;
    void *abort_callback_data;
    bool embeddings, offload_kqv, no_perf, op_offload, swa_full, kv_unified;
    void *samplers;
    size_t n_samplers;
    char pad[256]; // room in case the real struct is longer (it is returned by value: see check)
};

void llama_backend_init(void);
struct llama_model_params llama_model_default_params(void);
struct llama_context_params llama_context_default_params(void);
struct llama_model *llama_model_load_from_file(const char *, struct llama_model_params);
const struct llama_vocab *llama_model_get_vocab(const struct llama_model *);
int32_t llama_vocab_n_tokens(const struct llama_vocab *);
struct llama_context *llama_init_from_model(struct llama_model *, struct llama_context_params);
llama_batch llama_batch_init(int32_t n_tokens, int32_t embd, int32_t n_seq_max);
int32_t llama_decode(struct llama_context *, llama_batch);
void llama_synchronize(struct llama_context *);
float *llama_get_logits_ith(struct llama_context *, int32_t i);

int main(int argc, char **argv) {
    if (argc != 8) {
        fprintf(stderr, "usage: %s MODEL TYPE_K TYPE_V FA SPLIT OUT tokens\n", argv[0]);
        return 2;
    }
    int tk = atoi(argv[2]), tv = atoi(argv[3]), fa = atoi(argv[4]), split = atoi(argv[5]);
    int toks[1024], n = 0;
    for (char *s = strtok(argv[7], ","); s && n < 1024; s = strtok(NULL, ",")) toks[n++] = atoi(s);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    if (!mp.use_mmap || mp.vocab_only) { fprintf(stderr, "model params layout unexpected\n"); return 1; }
    mp.n_gpu_layers = 0;
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) return 1;
    int nv = llama_vocab_n_tokens(llama_model_get_vocab(model));
    struct llama_context_params cp = llama_context_default_params();
    // The defaults this layout must show (llama.cpp's llama_context_default_params).
    if (cp.n_ctx != 512 || cp.n_batch != 2048 || cp.n_ubatch != 512 || cp.n_seq_max != 1 || cp.type_k != 1 || cp.type_v != 1 ||
        cp.flash_attn_type != -1 || (cp.yarn_attn_factor != 1.0f && cp.yarn_attn_factor != -1.0f) || !cp.offload_kqv) {
        fprintf(stderr, "context params layout unexpected: n_ctx %u n_batch %u n_ubatch %u seq %u type_k %d type_v %d fa %d yarn_attn %g offload %d\n",
                cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max, cp.type_k, cp.type_v, cp.flash_attn_type, cp.yarn_attn_factor, cp.offload_kqv);
        return 1;
    }
    cp.n_ctx = 256;
    cp.n_batch = ((split + 255) / 256) * 256;
    cp.n_ubatch = cp.n_batch;
    cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = 2;
    cp.flash_attn_type = fa;
    cp.no_perf = true;
    cp.type_k = tk;
    cp.type_v = tv;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "no context\n"); return 1; }
    FILE *out = fopen(argv[6], "wb");
    llama_batch b = llama_batch_init(split, 0, 1);
    for (int p0 = 0; p0 < n;) {
        int cnt = p0 == 0 ? split : 1;
        for (int j = 0; j < cnt; j++) {
            b.token[j] = toks[p0 + j];
            b.pos[j] = p0 + j;
            b.n_seq_id[j] = 1;
            b.seq_id[j][0] = 0;
            b.logits[j] = 1;
        }
        b.n_tokens = cnt;
        if (llama_decode(ctx, b) != 0) { fprintf(stderr, "decode failed at %d\n", p0); return 1; }
        llama_synchronize(ctx);
        for (int j = 0; j < cnt; j++) fwrite(llama_get_logits_ith(ctx, j), sizeof(float), nv, out);
        p0 += cnt;
    }
    fclose(out);
    printf("kvlogits: %d tokens, vocab %d, type_k %d type_v %d fa %d\n", n, nv, tk, tv, fa);
    return 0;
}
