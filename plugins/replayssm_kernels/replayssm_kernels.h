/*
 * libreplayssm_kernels: the ReplaySSM decode kernels, compiled ahead of time, behind a C ABI.
 *
 * One function per op: device pointers, sizes, strides (in elements) and a CUDA stream
 * (a CUstream / cudaStream_t; NULL for the legacy default stream). Each call picks the
 * kernel specialisation built for the device's architecture and the call's shape, and
 * returns RS_SUCCESS or an error code (never exits, never synchronises: calls can be
 * captured in CUDA graphs). Modules are loaded once per CUDA context, thread-safely.
 * The library loads the CUDA driver (libcuda.so.1) itself at the first call.
 * On sm_90+ an op may launch a kernel as a programmatic dependent launch of the one before
 * it (the build marks which, as Triton's JIT launches them); TRTLLM_REPLAYSSM_PDL=0 in the
 * environment at the first call launches every kernel plainly. At large batches an op may
 * launch its fold on a second stream of the library's, forked from and joined back into
 * the caller's stream with events (capturable; see trtllm_replayssm/ops/streams.py).
 */
#ifndef REPLAYSSM_KERNELS_H
#define REPLAYSSM_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define RS_API __attribute__((visibility("default")))
#else
#define RS_API
#endif

typedef enum {
  RS_SUCCESS = 0,
  RS_ERR_INVALID_ARGUMENT = 1, /* a null pointer, a size or cursor range out of bounds */
  RS_ERR_UNSUPPORTED = 2,      /* no specialisation was built for this shape / dtype / layout */
  RS_ERR_NO_KERNEL_FOR_ARCH = 3, /* none was built for this device's architecture */
  RS_ERR_NO_DRIVER = 4,        /* libcuda.so.1 could not be loaded or initialised */
  RS_ERR_NO_CONTEXT = 5,       /* no current CUDA context on this thread / for the stream */
  RS_ERR_CUDA = 6,             /* a CUDA driver call failed (rs_last_error_message says which) */
  RS_ERR_MISALIGNED = 7        /* a pointer or stride breaks a specialisation's 16-divisibility */
} rs_status;

typedef enum { RS_DTYPE_FP32 = 0, RS_DTYPE_BF16 = 1, RS_DTYPE_FP16 = 2 } rs_dtype;

typedef enum {
  RS_ROUTE_OUTPUT_ONLY = 0,   /* replay: non-flush launch + fold launch */
  RS_ROUTE_STANDARD_STEP = 1, /* the standard kernel on an empty ring */
  RS_ROUTE_ALWAYS_FLUSH = 2,  /* fold any non-empty ring, then the standard kernel */
  RS_ROUTE_STANDARD = 3       /* the standard kernel, no ring (the baseline) */
} rs_route;

/* One Mamba2 decode step (TensorRT-LLM's selective_state_update call). D, dt_bias, the
 * slot indices (int32) and dt_softplus are required by the AOT build; z and force_flush
 * (int8, one per row) are optional (NULL). Ring and cursors are ignored on RS_ROUTE_STANDARD. */
typedef struct {
  void* state;            /* (slots, H, P, N), innermost stride 1 */
  const void* x;          /* (B, H, P) */
  const void* dt;         /* (B, H): one dt per head (stride_dt[1] may be 0 for tied layouts) */
  const float* A;         /* (H,) fp32 */
  const void* B;          /* (B, G, N) */
  const void* C;          /* (B, G, N) */
  const float* D;         /* (H, P) fp32 (stride_D[1] = 0 for per-head D) */
  const void* z;          /* (B, H, P) or NULL */
  const float* dt_bias;   /* (H,) fp32 */
  void* out;              /* (B, H, P) */
  const int32_t* slot_idx;/* (B,) */
  void* x_cache;          /* (slots, H, L, P), act dtype */
  float* dt_cache;        /* (slots, H, L) */
  void* B_cache;          /* (slots, G, L, N), act dtype */
  int32_t* write_pos;     /* (slots,) */
  const int8_t* force_flush; /* (B,) or NULL */
  int64_t batch, num_slots, nheads, headdim, dstate, ngroups, buffer_len, pad_slot_id;
  int64_t stride_state[3];             /* slot, head, headdim */
  int64_t stride_x[2], stride_dt[2], stride_A, stride_B[2], stride_C[2], stride_D[2], stride_z[2];
  int64_t stride_dt_bias, stride_out[2];
  int64_t stride_x_cache[3], stride_dt_cache[2], stride_B_cache[3]; /* slot, head|group, L */
  int32_t state_dtype, act_dtype;      /* rs_dtype */
  int32_t dt_softplus;                 /* must be 1 */
  int32_t route;                       /* rs_route */
} rs_mamba2_step_args;

/* One Gated DeltaNet decode step (TensorRT-LLM's fused sigmoid-gating delta-rule update),
 * q/k L2-normalised in the kernel; rings of corrected values d and keys k (in ring_dtype:
 * fp32, or bf16 beside a bf16 state, the cases built; trtllm_replayssm.cache.gdn_ring_dtype)
 * and log-decays g (fp32). force_flush optional (NULL). */
typedef struct {
  void* state;            /* (slots, HV, V, K), innermost stride 1 */
  const void* q;          /* (B, H, K) */
  const void* k;          /* (B, H, K) */
  const void* v;          /* (B, HV, V) */
  const void* a;          /* (B, HV) */
  const void* b;          /* (B, HV) */
  const float* A_log;     /* (HV,) */
  const float* dt_bias;   /* (HV,) */
  void* out;              /* (B, HV, V) */
  const int32_t* slot_idx;/* (B,) */
  void* d_cache;          /* (slots, HV, L, V), ring_dtype */
  void* k_cache;          /* (slots, H, L, K), ring_dtype */
  float* g_cache;         /* (slots, HV, L) */
  int32_t* write_pos;     /* (slots,) */
  const int8_t* force_flush;
  int64_t batch, num_slots, num_k_heads, num_v_heads, head_k_dim, head_v_dim, buffer_len, pad_slot_id;
  int64_t stride_state[3];    /* slot, head, v row; each slot's (HV, V, K) block packed: V * K, K */
  int64_t stride_q[2], stride_k[2], stride_v[2], stride_a[2], stride_b[2], stride_out[2];
  int64_t stride_d_cache[3], stride_k_cache[3], stride_g_cache[2];
  float scale, softplus_beta, softplus_threshold; /* scale 0: 1/sqrt(K) */
  int32_t state_dtype, act_dtype;
  int32_t route;
  int32_t ring_dtype;     /* rs_dtype of d_cache and k_cache (0, RS_DTYPE_FP32, in a zeroed struct) */
} rs_gdn_step_args;

/* Speculative verify of T = num_tokens tokens per row on a circular ring of
 * next_pow2(history_len + T) entries (built for T in {2, 3, 4, 6}, history_len 16). Tokens
 * are (B, T, ...); the cursors write_pos / origin (int32) and is_flush (int8) are moved by
 * rs_commit_spec after acceptance. D, dt_bias, slot indices and dt_softplus are required. */
typedef struct {
  void* state;
  const void* x;          /* (B, T, H, P) */
  const void* dt;         /* (B, T, H) */
  const float* A;         /* (H,) */
  const void* B;          /* (B, T, G, N) */
  const void* C;          /* (B, T, G, N) */
  const float* D;         /* (H, P) */
  const void* z;          /* (B, T, H, P) or NULL */
  const float* dt_bias;   /* (H,) */
  void* out;              /* (B, T, H, P) */
  const int32_t* slot_idx;
  void* x_ring;           /* (slots, H, buf, P) */
  float* dt_ring;         /* (slots, H, buf) */
  void* B_ring;           /* (slots, G, buf, N) */
  int32_t* write_pos;
  int32_t* origin;
  int8_t* is_flush;
  int64_t batch, num_tokens, history_len, num_slots, nheads, headdim, dstate, ngroups, pad_slot_id;
  int64_t stride_state[3], stride_x[3], stride_dt[3], stride_A, stride_B[3], stride_C[3], stride_D[2], stride_z[3];
  int64_t stride_dt_bias, stride_out[3], stride_x_ring[3], stride_dt_ring[2], stride_B_ring[3];
  int32_t state_dtype, act_dtype, dt_softplus;
  /* Device scratch of rs_mamba2_spec_workspace_size(batch, num_tokens, nheads, headdim)
   * bytes (16-byte aligned): the outputs' part without the state's product, which a
   * launch of its own then adds (the verify's default split). */
  void* workspace;
} rs_mamba2_spec_args;

typedef struct {
  void* state;
  const void* q;          /* (B, T, H, K) */
  const void* k;          /* (B, T, H, K) */
  const void* v;          /* (B, T, HV, V) */
  const void* a;          /* (B, T, HV) */
  const void* b;          /* (B, T, HV) */
  const float* A_log;
  const float* dt_bias;
  void* out;              /* (B, T, HV, V) */
  const int32_t* slot_idx;
  float* d_ring;          /* (slots, HV, buf, V) */
  float* k_ring;          /* (slots, H, buf, K) */
  float* g_ring;          /* (slots, HV, buf) */
  int32_t* write_pos;
  int32_t* origin;
  int8_t* is_flush;
  int64_t batch, num_tokens, history_len, num_slots, num_k_heads, num_v_heads, head_k_dim, head_v_dim, pad_slot_id;
  int64_t stride_state[3], stride_q[3], stride_k[3], stride_v[3], stride_a[3], stride_b[3], stride_out[3];
  int64_t stride_d_ring[3], stride_k_ring[3], stride_g_ring[2];
  float scale, softplus_beta, softplus_threshold; /* scale 0: 1/sqrt(K) */
  int32_t state_dtype, act_dtype;
  /* Device scratch of rs_gdn_spec_workspace_size(batch, num_tokens, num_v_heads, head_v_dim)
   * bytes (16-byte aligned): the drafts' solve and the ring part's outputs, a row and value
   * head, formed by a launch ahead of the state's product. */
  void* workspace;
} rs_gdn_spec_args;

RS_API int rs_mamba2_step(const rs_mamba2_step_args* args, void* stream);
RS_API int rs_gdn_step(const rs_gdn_step_args* args, void* stream);
RS_API int rs_mamba2_spec_verify(const rs_mamba2_spec_args* args, void* stream);
/* Bytes of rs_mamba2_spec_args.workspace / rs_gdn_spec_args.workspace for a verify of this size. */
RS_API int64_t rs_mamba2_spec_workspace_size(int64_t batch, int64_t num_tokens, int64_t nheads, int64_t headdim);
RS_API int64_t rs_gdn_spec_workspace_size(int64_t batch, int64_t num_tokens, int64_t num_v_heads,
                                          int64_t head_v_dim);
RS_API int rs_gdn_spec_verify(const rs_gdn_spec_args* args, void* stream);
/* After acceptance: accepted (B,) int32 tokens per row, bonus included; rows with <= 0 keep
 * their cursors. Slots entering decode: rs_reset_spec (pad_slot_id rows are skipped). */
RS_API int rs_commit_spec(int32_t* write_pos, int32_t* origin, int8_t* is_flush, int64_t num_slots,
                          const int32_t* accepted, const int32_t* slot_idx, int64_t batch, int64_t num_tokens,
                          int64_t history_len, int64_t pad_slot_id, void* stream);
RS_API int rs_reset_spec(int32_t* write_pos, int32_t* origin, int8_t* is_flush, int64_t num_slots,
                         const int32_t* slots, int64_t n, int64_t num_tokens, int64_t history_len,
                         int64_t pad_slot_id, void* stream);

/* Cursors, once per decode step after every layer ran (flush_all: the step's route
 * flushed every row). Padding rows and rows with an out-of-range slot never move. */
RS_API int rs_advance_write_pos(int32_t* write_pos, int64_t num_slots, int64_t buffer_len,
                                const int32_t* slot_idx, const int8_t* force_flush, int64_t batch,
                                int64_t pad_slot_id, int flush_all, void* stream);
/* Slots entering decode: empty their rings. */
RS_API int rs_reset_write_pos(int32_t* write_pos, int64_t num_slots, const int32_t* slots, int64_t n,
                              int64_t pad_slot_id, void* stream);

/* Generic launch by specialisation key (what the Python AOT backend uses): values in the
 * kernel's parameter order; types as in the manifest. */
typedef union {
  const void* p;
  int64_t i;
  double f;
} rs_value;
RS_API int rs_launch_kernel(const char* key, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                            const rs_value* values, int num_values, void* stream);

/* Introspection. */
RS_API const char* rs_status_string(int status);
RS_API const char* rs_last_error_message(void); /* this thread's last failure, in words */
RS_API int rs_num_kernels(void);
RS_API const char* rs_kernel_key(int i);
RS_API int rs_kernel_arch(int i);
RS_API int rs_has_arch(int arch);  /* 1 if kernels were built for this compute capability (e.g. 90) */
/* The tuned tables whose configs the build took for this compute capability: "sm90" (the
 * architecture's), "sm90_h100_80gb_hbm3" (a GPU's own: `aot build --gpu`); NULL if none. */
RS_API const char* rs_table_tag(int arch);
RS_API int rs_kernel_programmatic(int i); /* 1 if kernel i is a programmatic dependent launch */

/* Launch the kernels built as programmatic dependent launches so (1, the default unless
 * TRTLLM_REPLAYSSM_PDL=0) or plainly (0); returns the previous setting. For all threads. */
RS_API int rs_set_programmatic_launches(int enabled);

#ifdef __cplusplus
}
#endif
#endif /* REPLAYSSM_KERNELS_H */
