/*
 * The launcher of the AOT-compiled ReplaySSM kernels (see replayssm_kernels.h).
 *
 * Written here rather than taken from Triton's compile tool: that one calls exit() on a
 * CUDA error, is not thread-safe and passes fp32 scalars as double in Triton >= 3.4.
 * Here: errors come back as codes (with a per-thread message), modules are loaded once
 * per CUDA context under a mutex, fp32 scalars are passed as float, and every kernel gets
 * Triton 3.6's two hidden trailing pointers (global and profile scratch: NULL, the build
 * checks that no kernel needs scratch).
 *
 * The op functions (rs_mamba2_step, ...) do what the Python wrappers do: pick the op case
 * for the call's shape and batch (nearest batch point in log scale, as the tuned table
 * does), give every kernel parameter its value by name, and launch the case's kernels in
 * order (a fold the case marks so on a side stream beside the launch after it, as
 * trtllm_replayssm.ops.streams does). The tables come from the AOT build
 * (replayssm_kernels_table.c).
 */
#include "replayssm_kernels.h"
#include "replayssm_kernels_table.h"

#include <cuda.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors ------------------------------------------------------------------------ */
static __thread char g_message[512];

static int fail(int status, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_message, sizeof g_message, fmt, ap);
  va_end(ap);
  return status;
}

const char* rs_status_string(int status) {
  switch (status) {
    case RS_SUCCESS: return "success";
    case RS_ERR_INVALID_ARGUMENT: return "invalid argument";
    case RS_ERR_UNSUPPORTED: return "no specialisation built for this call";
    case RS_ERR_NO_KERNEL_FOR_ARCH: return "no kernels built for this GPU architecture";
    case RS_ERR_NO_DRIVER: return "CUDA driver not available";
    case RS_ERR_NO_CONTEXT: return "no CUDA context";
    case RS_ERR_CUDA: return "CUDA driver error";
    case RS_ERR_MISALIGNED: return "pointer or stride not divisible by 16 where the kernel assumes it";
    default: return "unknown status";
  }
}

const char* rs_last_error_message(void) { return g_message; }

/* ---- the driver, loaded at first use ------------------------------------------------- */
typedef struct {
  CUresult (*Init)(unsigned);
  CUresult (*CtxGetCurrent)(CUcontext*);
  CUresult (*StreamGetCtx)(CUstream, CUcontext*);
  CUresult (*CtxPushCurrent)(CUcontext);
  CUresult (*CtxPopCurrent)(CUcontext*);
  CUresult (*CtxGetDevice)(CUdevice*);
  CUresult (*DeviceGetAttribute)(int*, CUdevice_attribute, CUdevice);
  CUresult (*ModuleLoadData)(CUmodule*, const void*);
  CUresult (*ModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*FuncSetAttribute)(CUfunction, CUfunction_attribute, int);
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           CUstream, void**, void**);
  /* CUDA 12.0+; NULL on an older driver, where programmatic launches are made plainly */
  CUresult (*LaunchKernelEx)(const CUlaunchConfig*, CUfunction, void**, void**);
  CUresult (*GetErrorString)(CUresult, const char**);
  CUresult (*StreamCreate)(CUstream*, unsigned);
  CUresult (*EventCreate)(CUevent*, unsigned);
  CUresult (*EventRecord)(CUevent, CUstream);
  CUresult (*EventDestroy)(CUevent);
  CUresult (*StreamWaitEvent)(CUstream, CUevent, unsigned);
} driver_api;

static driver_api g_cu;
static int g_driver_status = -1; /* -1: not tried */
/* Kernels the build marks programmatic (rs_kernel_desc.programmatic) are launched as
 * programmatic dependent launches of the launch before them, as Triton's JIT does with
 * launch_pdl; TRTLLM_REPLAYSSM_PDL=0 (read at driver load) or
 * rs_set_programmatic_launches(0) launches them plainly. Either way is correct: such a
 * kernel waits for its primary (griddepcontrol.wait) where it must, and the wait returns at
 * once after a plain launch. -1: not decided yet. */
static int g_programmatic = -1;

static int programmatic_from_env(void) {
  const char* pdl = getenv("TRTLLM_REPLAYSSM_PDL");
  return !(pdl && strcmp(pdl, "0") == 0);
}
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static int load_driver_locked(void) {
  if (g_driver_status >= 0) return g_driver_status;
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) return g_driver_status = RS_ERR_NO_DRIVER;
#define SYM(field, name)                                   \
  *(void**)(&g_cu.field) = dlsym(h, name);                 \
  if (!g_cu.field) return g_driver_status = RS_ERR_NO_DRIVER;
  SYM(Init, "cuInit")
  SYM(CtxGetCurrent, "cuCtxGetCurrent")
  SYM(StreamGetCtx, "cuStreamGetCtx")
  SYM(CtxPushCurrent, "cuCtxPushCurrent_v2")
  SYM(CtxPopCurrent, "cuCtxPopCurrent_v2")
  SYM(CtxGetDevice, "cuCtxGetDevice")
  SYM(DeviceGetAttribute, "cuDeviceGetAttribute")
  SYM(ModuleLoadData, "cuModuleLoadData")
  SYM(ModuleGetFunction, "cuModuleGetFunction")
  SYM(FuncSetAttribute, "cuFuncSetAttribute")
  SYM(LaunchKernel, "cuLaunchKernel")
  SYM(GetErrorString, "cuGetErrorString")
  SYM(StreamCreate, "cuStreamCreate")
  SYM(EventCreate, "cuEventCreate")
  SYM(EventRecord, "cuEventRecord")
  SYM(EventDestroy, "cuEventDestroy_v2")
  SYM(StreamWaitEvent, "cuStreamWaitEvent")
#undef SYM
  *(void**)(&g_cu.LaunchKernelEx) = dlsym(h, "cuLaunchKernelEx");
  if (g_programmatic < 0) g_programmatic = programmatic_from_env();
  if (g_cu.Init(0) != CUDA_SUCCESS) return g_driver_status = RS_ERR_NO_DRIVER;
  return g_driver_status = RS_SUCCESS;
}

static int cuda_fail(CUresult r, const char* what) {
  const char* s = "?";
  if (g_cu.GetErrorString) g_cu.GetErrorString(r, &s);
  return fail(RS_ERR_CUDA, "%s failed: %s (%d)", what, s, (int)r);
}

/* ---- per-context modules ------------------------------------------------------------- */
#define MAX_CONTEXTS 16
typedef struct {
  CUcontext ctx;
  int arch;
  CUfunction* functions; /* rs_num_kernels_built entries, loaded lazily */
  CUstream side;         /* the side stream of cases that launch on one (made at first use) */
} context_slot;
static context_slot g_contexts[MAX_CONTEXTS];

/* The context a launch on `stream` runs in, and its slot (created on first sight). */
static int context_for(CUstream stream, context_slot** out) {
  CUcontext ctx = NULL;
  CUresult r = stream ? g_cu.StreamGetCtx(stream, &ctx) : g_cu.CtxGetCurrent(&ctx);
  if (r != CUDA_SUCCESS) return cuda_fail(r, "cuStreamGetCtx");
  if (!ctx) return fail(RS_ERR_NO_CONTEXT, "no current CUDA context on this thread");
  for (int i = 0; i < MAX_CONTEXTS; ++i) {
    if (g_contexts[i].ctx == ctx) {
      *out = &g_contexts[i];
      return RS_SUCCESS;
    }
  }
  for (int i = 0; i < MAX_CONTEXTS; ++i) {
    if (g_contexts[i].ctx) continue;
    CUdevice dev;
    int major = 0, minor = 0;
    if ((r = g_cu.CtxPushCurrent(ctx)) != CUDA_SUCCESS) return cuda_fail(r, "cuCtxPushCurrent");
    r = g_cu.CtxGetDevice(&dev);
    if (r == CUDA_SUCCESS) r = g_cu.DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    if (r == CUDA_SUCCESS) r = g_cu.DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    g_cu.CtxPopCurrent(&ctx);
    if (r != CUDA_SUCCESS) return cuda_fail(r, "cuDeviceGetAttribute");
    g_contexts[i].functions = (CUfunction*)calloc((size_t)rs_num_kernels_built + 1, sizeof(CUfunction));
    if (!g_contexts[i].functions) return fail(RS_ERR_CUDA, "out of host memory");
    g_contexts[i].arch = major * 10 + minor;
    g_contexts[i].ctx = ctx;
    *out = &g_contexts[i];
    return RS_SUCCESS;
  }
  return fail(RS_ERR_CUDA, "more than %d CUDA contexts", MAX_CONTEXTS);
}

static int function_for(context_slot* slot, int k, CUfunction* fn) {
  if (slot->functions[k]) {
    *fn = slot->functions[k];
    return RS_SUCCESS;
  }
  const rs_kernel_desc* d = &rs_kernels[k];
  CUmodule module;
  CUresult r = g_cu.CtxPushCurrent(slot->ctx);
  if (r != CUDA_SUCCESS) return cuda_fail(r, "cuCtxPushCurrent");
  r = g_cu.ModuleLoadData(&module, d->cubin);
  if (r == CUDA_SUCCESS) r = g_cu.ModuleGetFunction(fn, module, d->name);
  if (r == CUDA_SUCCESS && d->shared > 49152)
    r = g_cu.FuncSetAttribute(*fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, d->shared);
  CUcontext popped;
  g_cu.CtxPopCurrent(&popped);
  if (r != CUDA_SUCCESS) return cuda_fail(r, "loading a kernel module");
  slot->functions[k] = *fn;
  return RS_SUCCESS;
}

/* ---- launching one kernel with named values ------------------------------------------ */
typedef struct {
  const char* const* names; /* the op's value names */
  const rs_value* values;
  int count;
} named_values;

static int find_name(const named_values* nv, const char* name) {
  for (int i = 0; i < nv->count; ++i)
    if (strcmp(nv->names[i], name) == 0) return i;
  return -1;
}

#define MAX_PARAMS 96
static int launch_values(int k, unsigned gx, unsigned gy, unsigned gz, const rs_value* values, CUstream stream) {
  const rs_kernel_desc* d = &rs_kernels[k];
  if (d->num_params + 2 > MAX_PARAMS) return fail(RS_ERR_UNSUPPORTED, "%s: too many parameters", d->key);
  if (gx == 0 || gy == 0 || gz == 0) return RS_SUCCESS; /* nothing to do (an empty batch) */
  if (gy > 65535 || gz > 65535) return fail(RS_ERR_INVALID_ARGUMENT, "grid (%u, %u, %u) too large", gx, gy, gz);
  union {
    const void* p;
    int32_t i32;
    int64_t i64;
    float f32;
  } storage[MAX_PARAMS];
  void* params[MAX_PARAMS];
  for (int i = 0; i < d->num_params; ++i) {
    const rs_param_desc* p = &d->params[i];
    const rs_value v = values[i];
    switch (p->type) {
      case RS_T_PTR:
        if (p->div16 && ((uintptr_t)v.p % 16) != 0)
          return fail(RS_ERR_MISALIGNED, "%s: %s is not 16-byte aligned", d->key, p->name);
        storage[i].p = v.p;
        break;
      case RS_T_I32:
        if (v.i < INT32_MIN || v.i > INT32_MAX) return fail(RS_ERR_INVALID_ARGUMENT, "%s: %s out of int32", d->key, p->name);
        if (p->div16 && v.i % 16 != 0) return fail(RS_ERR_MISALIGNED, "%s: %s = %lld is not a multiple of 16", d->key, p->name, (long long)v.i);
        storage[i].i32 = (int32_t)v.i;
        break;
      case RS_T_I64:
        if (p->div16 && v.i % 16 != 0) return fail(RS_ERR_MISALIGNED, "%s: %s is not a multiple of 16", d->key, p->name);
        storage[i].i64 = v.i;
        break;
      default: /* RS_T_F32: a float, not the double a varargs launcher would pass */
        storage[i].f32 = (float)v.f;
        break;
    }
    params[i] = &storage[i];
  }
  storage[d->num_params].p = NULL; /* global scratch */
  storage[d->num_params + 1].p = NULL; /* profile scratch */
  params[d->num_params] = &storage[d->num_params];
  params[d->num_params + 1] = &storage[d->num_params + 1];

  int status;
  context_slot* slot;
  CUfunction fn;
  pthread_mutex_lock(&g_lock);
  status = load_driver_locked();
  if (status != RS_SUCCESS) {
    pthread_mutex_unlock(&g_lock);
    return fail(status, "libcuda.so.1 could not be loaded or initialised");
  }
  status = context_for(stream, &slot);
  if (status == RS_SUCCESS && slot->arch != d->arch)
    status = fail(RS_ERR_NO_KERNEL_FOR_ARCH, "%s was built for sm_%d, the device is sm_%d", d->key, d->arch, slot->arch);
  if (status == RS_SUCCESS) status = function_for(slot, k, &fn);
  pthread_mutex_unlock(&g_lock);
  if (status != RS_SUCCESS) return status;
  CUresult r;
  if (d->programmatic && g_programmatic > 0 && g_cu.LaunchKernelEx) {
    CUlaunchAttribute attr;
    memset(&attr, 0, sizeof attr);
    attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig config;
    memset(&config, 0, sizeof config);
    config.gridDimX = gx;
    config.gridDimY = gy;
    config.gridDimZ = gz;
    config.blockDimX = 32u * (unsigned)d->num_warps;
    config.blockDimY = 1;
    config.blockDimZ = 1;
    config.sharedMemBytes = (unsigned)d->shared;
    config.hStream = stream;
    config.attrs = &attr;
    config.numAttrs = 1;
    r = g_cu.LaunchKernelEx(&config, fn, params, NULL);
    return r == CUDA_SUCCESS ? RS_SUCCESS : cuda_fail(r, "cuLaunchKernelEx");
  }
  r = g_cu.LaunchKernel(fn, gx, gy, gz, 32u * (unsigned)d->num_warps, 1, 1, (unsigned)d->shared, stream, params,
                        NULL);
  return r == CUDA_SUCCESS ? RS_SUCCESS : cuda_fail(r, "cuLaunchKernel");
}

static int launch_named(int k, unsigned gx, unsigned gy, unsigned gz, const named_values* nv, CUstream stream) {
  const rs_kernel_desc* d = &rs_kernels[k];
  rs_value ordered[MAX_PARAMS];
  if (d->num_params > MAX_PARAMS) return fail(RS_ERR_UNSUPPORTED, "%s: too many parameters", d->key);
  for (int i = 0; i < d->num_params; ++i) {
    int j = find_name(nv, d->params[i].name);
    if (j < 0) return fail(RS_ERR_UNSUPPORTED, "%s: no value for parameter %s", d->key, d->params[i].name);
    ordered[i] = nv->values[j];
  }
  return launch_values(k, gx, gy, gz, ordered, stream);
}

static int device_arch(CUstream stream, int* arch);

int rs_launch_kernel(const char* key, unsigned gx, unsigned gy, unsigned gz, const rs_value* values, int num_values,
                     void* stream) {
  if (!key || (num_values > 0 && !values)) return fail(RS_ERR_INVALID_ARGUMENT, "null key or values");
  int arch = -1, status = device_arch((CUstream)stream, &arch);
  if (status != RS_SUCCESS) return status;
  for (int k = 0; k < rs_num_kernels_built; ++k) {
    if (rs_kernels[k].arch != arch || strcmp(rs_kernels[k].key, key) != 0) continue;
    if (num_values != rs_kernels[k].num_params)
      return fail(RS_ERR_INVALID_ARGUMENT, "%s takes %d values, got %d", key, rs_kernels[k].num_params, num_values);
    return launch_values(k, gx, gy, gz, values, (CUstream)stream);
  }
  return fail(RS_ERR_UNSUPPORTED, "no kernel %s for sm_%d", key, arch);
}

/* ---- op cases ------------------------------------------------------------------------ */
static int device_arch(CUstream stream, int* arch) {
  pthread_mutex_lock(&g_lock);
  int status = load_driver_locked();
  context_slot* slot = NULL;
  if (status == RS_SUCCESS) status = context_for(stream, &slot);
  if (slot) *arch = slot->arch;
  pthread_mutex_unlock(&g_lock);
  if (status == RS_ERR_NO_DRIVER) return fail(status, "libcuda.so.1 could not be loaded or initialised");
  return status;
}

/* The case for `key` at the batch point nearest `batch` (log scale) on `arch`. */
static int find_case(int arch, const char* key, int64_t batch, const rs_case_desc** out) {
  double best = INFINITY;
  int any_arch = 0;
  *out = NULL;
  for (int i = 0; i < rs_num_cases; ++i) {
    if (rs_cases[i].arch != arch) continue;
    any_arch = 1;
    if (strcmp(rs_cases[i].key, key) != 0) continue;
    double dist = fabs(log2((double)rs_cases[i].batch) - log2((double)(batch > 0 ? batch : 1)));
    if (dist < best) {
      best = dist;
      *out = &rs_cases[i];
    }
  }
  if (!any_arch) return fail(RS_ERR_NO_KERNEL_FOR_ARCH, "no kernels were built for sm_%d", arch);
  if (!*out) return fail(RS_ERR_UNSUPPORTED, "no specialisation was built for %s", key);
  return RS_SUCCESS;
}

static const char* dtype_name(int32_t d) {
  return d == RS_DTYPE_FP32 ? "fp32" : d == RS_DTYPE_BF16 ? "bf16" : d == RS_DTYPE_FP16 ? "fp16" : NULL;
}
static const char* route_name(int32_t r) {
  static const char* names[] = {"output_only", "standard_step", "always_flush", "standard"};
  return r >= 0 && r <= 3 ? names[r] : NULL;
}
static unsigned cdiv(int64_t a, int64_t b) { return (unsigned)((a + b - 1) / b); }

/* ---- the side stream (trtllm_replayssm.ops.streams) ------------------------------------ */
/* A case may launch some kernels on a second stream of the stream's context, forked from
 * the caller's stream (an event) before them and joined back (an event) after the case's
 * last launch: under CUDA-graph capture these are edges of the graph, with no host
 * synchronisation. Events are made per call, so calls from several threads do not share
 * them; the side stream is one per context. */
typedef struct {
  CUstream side;
  CUevent forked, joined;
} side_fork;

static int fork_side_stream(CUstream stream, side_fork* f) {
  memset(f, 0, sizeof *f);
  context_slot* slot = NULL;
  pthread_mutex_lock(&g_lock);
  int status = context_for(stream, &slot);
  CUresult r = CUDA_SUCCESS;
  if (status == RS_SUCCESS) {
    CUcontext popped;
    if ((r = g_cu.CtxPushCurrent(slot->ctx)) == CUDA_SUCCESS) {
      if (!slot->side) r = g_cu.StreamCreate(&slot->side, CU_STREAM_NON_BLOCKING);
      if (r == CUDA_SUCCESS) r = g_cu.EventCreate(&f->forked, CU_EVENT_DISABLE_TIMING);
      if (r == CUDA_SUCCESS) r = g_cu.EventCreate(&f->joined, CU_EVENT_DISABLE_TIMING);
      g_cu.CtxPopCurrent(&popped);
    }
    f->side = slot->side;
  }
  pthread_mutex_unlock(&g_lock);
  if (status != RS_SUCCESS) return status;
  if (r == CUDA_SUCCESS) r = g_cu.EventRecord(f->forked, stream);
  if (r == CUDA_SUCCESS) r = g_cu.StreamWaitEvent(f->side, f->forked, 0);
  return r == CUDA_SUCCESS ? RS_SUCCESS : cuda_fail(r, "forking the side stream");
}

static void release_side_fork(side_fork* f) {
  if (f->forked) g_cu.EventDestroy(f->forked); /* (released once the work recorded on it is done) */
  if (f->joined) g_cu.EventDestroy(f->joined);
}

/* Join the side stream back into `stream` and release the events. */
static int join_side_stream(CUstream stream, side_fork* f) {
  CUresult r = g_cu.EventRecord(f->joined, f->side);
  if (r == CUDA_SUCCESS) r = g_cu.StreamWaitEvent(stream, f->joined, 0);
  release_side_fork(f);
  return r == CUDA_SUCCESS ? RS_SUCCESS : cuda_fail(r, "joining the side stream");
}

/* Launch the case for `key` at the batch point nearest `batch`: each kernel over
 * (inner blocks, head groups, rows), the grid the Python wrappers use, on the caller's
 * stream or, where the case says so, on the side stream. */
static int launch_step_case(const char* key, int64_t batch, int64_t inner, int64_t heads, const named_values* nv,
                            CUstream stream) {
  int arch = 0, status = device_arch(stream, &arch);
  if (status != RS_SUCCESS) return status;
  const rs_case_desc* c;
  if ((status = find_case(arch, key, batch, &c)) != RS_SUCCESS) return status;
  int beside = 0;
  for (int i = 0; i < c->num_launches; ++i) beside |= c->side_stream[i];
  side_fork f;
  if (beside && (status = fork_side_stream(stream, &f)) != RS_SUCCESS) {
    release_side_fork(&f);
    return status;
  }
  for (int i = 0; i < c->num_launches && status == RS_SUCCESS; ++i) {
    const rs_kernel_desc* d = &rs_kernels[c->launches[i]];
    unsigned rows = d->row_progs ? (unsigned)d->row_progs : cdiv(batch, d->row_block); /* launch.fold_row_programs */
    status = launch_named(c->launches[i], cdiv(inner, d->block), cdiv(heads, d->heads_per_prog), rows, nv,
                          c->side_stream[i] ? f.side : stream);
  }
  if (beside) {
    int joined = join_side_stream(stream, &f);
    if (status == RS_SUCCESS) status = joined;
  }
  return status;
}

#define PTR(v) ((rs_value){.p = (const void*)(v)})
#define INT(v) ((rs_value){.i = (int64_t)(v)})
#define FLT(v) ((rs_value){.f = (double)(v)})

/* Values by kernel parameter name; the X-list keeps names and values side by side. */
#define MAMBA2_VALUES(X)                                                                                      \
  X(state_ptr, PTR(a->state)) X(x_cache_ptr, PTR(a->x_cache)) X(dt_cache_ptr, PTR(a->dt_cache))                \
  X(B_cache_ptr, PTR(a->B_cache)) X(write_pos_ptr, PTR(standard ? a->state : (void*)a->write_pos))             \
  X(force_flush_ptr, PTR(a->force_flush ? (const void*)a->force_flush : (const void*)a->write_pos))           \
  X(x_ptr, PTR(a->x)) X(dt_ptr, PTR(a->dt)) X(A_ptr, PTR(a->A)) X(B_ptr, PTR(a->B)) X(C_ptr, PTR(a->C))         \
  X(D_ptr, PTR(a->D)) X(z_ptr, PTR(a->z ? a->z : a->x)) X(dt_bias_ptr, PTR(a->dt_bias)) X(out_ptr, PTR(a->out)) \
  X(slot_idx_ptr, PTR(a->slot_idx)) X(num_slots, INT(a->num_slots)) X(batch, INT(a->batch))                   \
  X(nheads, INT(a->nheads)) X(headdim, INT(a->headdim)) X(dstate, INT(a->dstate)) X(heads_per_group, INT(a->nheads / a->ngroups))          \
  X(buffer_len, INT(cursor_len)) X(pad_slot_id, INT(a->pad_slot_id))                                             \
  X(stride_state_slot, INT(a->stride_state[0])) X(stride_state_h, INT(a->stride_state[1]))                     \
  X(stride_state_p, INT(a->stride_state[2])) X(stride_xc_slot, INT(a->stride_x_cache[0]))                      \
  X(stride_xc_h, INT(a->stride_x_cache[1])) X(stride_xc_l, INT(a->stride_x_cache[2]))                          \
  X(stride_dtc_slot, INT(a->stride_dt_cache[0])) X(stride_dtc_h, INT(a->stride_dt_cache[1]))                   \
  X(stride_Bc_slot, INT(a->stride_B_cache[0])) X(stride_Bc_g, INT(a->stride_B_cache[1]))                       \
  X(stride_Bc_l, INT(a->stride_B_cache[2])) X(stride_x_b, INT(a->stride_x[0])) X(stride_x_h, INT(a->stride_x[1])) \
  X(stride_dt_b, INT(a->stride_dt[0])) X(stride_dt_h, INT(a->stride_dt[1])) X(stride_A_h, INT(a->stride_A))     \
  X(stride_B_b, INT(a->stride_B[0])) X(stride_B_g, INT(a->stride_B[1])) X(stride_C_b, INT(a->stride_C[0]))       \
  X(stride_C_g, INT(a->stride_C[1])) X(stride_D_h, INT(a->stride_D[0])) X(stride_D_p, INT(a->stride_D[1]))       \
  X(stride_z_b, INT(a->z ? a->stride_z[0] : a->stride_x[0])) X(stride_z_h, INT(a->z ? a->stride_z[1] : a->stride_x[1])) \
  X(stride_dtb_h, INT(a->stride_dt_bias)) X(stride_out_b, INT(a->stride_out[0])) X(stride_out_h, INT(a->stride_out[1]))

#define NAME_OF(n, v) #n,
#define COUNT_OF(array) ((int)(sizeof(array) / sizeof((array)[0])))
#define VALUE_OF(n, v) v,

int rs_mamba2_step(const rs_mamba2_step_args* a, void* stream) {
  if (!a) return fail(RS_ERR_INVALID_ARGUMENT, "args is NULL");
  const char* sd = dtype_name(a->state_dtype);
  const char* ad = dtype_name(a->act_dtype);
  const char* route = route_name(a->route);
  const int standard = a->route == RS_ROUTE_STANDARD;
  if (!sd || !ad || !route) return fail(RS_ERR_INVALID_ARGUMENT, "unknown dtype or route");
  if (!a->state || !a->x || !a->dt || !a->A || !a->B || !a->C || !a->out)
    return fail(RS_ERR_INVALID_ARGUMENT, "a required pointer is NULL");
  if (!a->D || !a->dt_bias || !a->slot_idx || !a->dt_softplus)
    return fail(RS_ERR_UNSUPPORTED, "the AOT build covers TensorRT-LLM's call: D, dt_bias, slot_idx, dt_softplus");
  if (!standard && (!a->x_cache || !a->dt_cache || !a->B_cache || !a->write_pos))
    return fail(RS_ERR_INVALID_ARGUMENT, "a ring or cursor pointer is NULL");
  if (a->batch < 0 || a->num_slots < 1 || a->nheads < 1 || a->headdim < 1 || a->dstate < 1 || a->ngroups < 1 ||
      a->nheads % a->ngroups != 0)
    return fail(RS_ERR_INVALID_ARGUMENT, "bad sizes (batch %lld, heads %lld, groups %lld)", (long long)a->batch,
                (long long)a->nheads, (long long)a->ngroups);
  if (!standard && (a->buffer_len < 1 || a->buffer_len > 64))
    return fail(RS_ERR_INVALID_ARGUMENT, "buffer_len %lld outside [1, 64]", (long long)a->buffer_len);
  if (a->batch == 0) return RS_SUCCESS;
  char key[256];
  snprintf(key, sizeof key, "mamba2_step|G=%lld|H=%lld|L=%lld|N=%lld|P=%lld|act=%s|ff=%d|route=%s|state=%s|z=%d",
           (long long)a->ngroups, (long long)a->nheads, standard ? 0LL : (long long)a->buffer_len, (long long)a->dstate,
           (long long)a->headdim, ad,
           (!standard && a->force_flush) ? 1 : 0, route, sd, a->z ? 1 : 0);
  /* The cursor bound the standard kernel checks: none, an empty ring, or any cursor. */
  const int64_t cursor_len = standard ? 0 : a->route == RS_ROUTE_STANDARD_STEP ? 1 : a->buffer_len;
  static const char* const names[] = {MAMBA2_VALUES(NAME_OF)};
  const rs_value values[] = {MAMBA2_VALUES(VALUE_OF)};
  const named_values nv = {names, values, COUNT_OF(names)};
  return launch_step_case(key, a->batch, a->headdim, a->nheads, &nv, (CUstream)stream);
}

#define GDN_VALUES(X)                                                                                         \
  X(state_ptr, PTR(a->state)) X(d_cache_ptr, PTR(a->d_cache)) X(k_cache_ptr, PTR(a->k_cache))                  \
  X(g_cache_ptr, PTR(a->g_cache)) X(write_pos_ptr, PTR(standard ? a->state : (void*)a->write_pos))             \
  X(force_flush_ptr, PTR(a->force_flush ? (const void*)a->force_flush : (const void*)a->write_pos))           \
  X(q_ptr, PTR(a->q)) X(k_ptr, PTR(a->k)) X(v_ptr, PTR(a->v)) X(a_ptr, PTR(a->a)) X(b_ptr, PTR(a->b))           \
  X(A_log_ptr, PTR(a->A_log)) X(dt_bias_ptr, PTR(a->dt_bias)) X(out_ptr, PTR(a->out))                          \
  X(slot_idx_ptr, PTR(a->slot_idx)) X(num_slots, INT(a->num_slots)) X(batch, INT(a->batch))                   \
  X(num_v_heads, INT(a->num_v_heads))                                                                          \
  X(head_k_dim, INT(a->head_k_dim)) X(head_v_dim, INT(a->head_v_dim))                                          \
  X(v_heads_per_k_head, INT(a->num_v_heads / a->num_k_heads)) X(buffer_len, INT(cursor_len))                   \
  X(pad_slot_id, INT(a->pad_slot_id)) X(stride_state_slot, INT(a->stride_state[0]))                            \
  X(stride_state_h, INT(a->stride_state[1])) X(stride_state_row, INT(a->stride_state[2]))                      \
  X(stride_dc_slot, INT(a->stride_d_cache[0])) X(stride_dc_h, INT(a->stride_d_cache[1]))                       \
  X(stride_dc_l, INT(a->stride_d_cache[2])) X(stride_kc_slot, INT(a->stride_k_cache[0]))                       \
  X(stride_kc_h, INT(a->stride_k_cache[1])) X(stride_kc_l, INT(a->stride_k_cache[2]))                          \
  X(stride_gc_slot, INT(a->stride_g_cache[0])) X(stride_gc_h, INT(a->stride_g_cache[1]))                       \
  X(stride_q_b, INT(a->stride_q[0])) X(stride_q_h, INT(a->stride_q[1])) X(stride_k_b, INT(a->stride_k[0]))       \
  X(stride_k_h, INT(a->stride_k[1])) X(stride_v_b, INT(a->stride_v[0])) X(stride_v_h, INT(a->stride_v[1]))       \
  X(stride_a_b, INT(a->stride_a[0])) X(stride_a_h, INT(a->stride_a[1])) X(stride_b_b, INT(a->stride_b[0]))       \
  X(stride_b_h, INT(a->stride_b[1])) X(stride_out_b, INT(a->stride_out[0])) X(stride_out_h, INT(a->stride_out[1])) \
  X(scale, FLT(scale)) X(softplus_beta, FLT(a->softplus_beta)) X(softplus_threshold, FLT(a->softplus_threshold))

int rs_gdn_step(const rs_gdn_step_args* a, void* stream) {
  if (!a) return fail(RS_ERR_INVALID_ARGUMENT, "args is NULL");
  const char* sd = dtype_name(a->state_dtype);
  const char* ad = dtype_name(a->act_dtype);
  const char* rd = dtype_name(a->ring_dtype);
  const char* route = route_name(a->route);
  const int standard = a->route == RS_ROUTE_STANDARD;
  if (!sd || !ad || !rd || !route) return fail(RS_ERR_INVALID_ARGUMENT, "unknown dtype or route");
  if (!a->state || !a->q || !a->k || !a->v || !a->a || !a->b || !a->A_log || !a->dt_bias || !a->out)
    return fail(RS_ERR_INVALID_ARGUMENT, "a required pointer is NULL");
  if (!a->slot_idx) return fail(RS_ERR_UNSUPPORTED, "the AOT build covers calls with slot indices");
  if (!standard && (!a->d_cache || !a->k_cache || !a->g_cache || !a->write_pos))
    return fail(RS_ERR_INVALID_ARGUMENT, "a ring or cursor pointer is NULL");
  if (a->batch < 0 || a->num_slots < 1 || a->num_k_heads < 1 || a->num_v_heads % a->num_k_heads != 0 ||
      a->head_k_dim < 1 || a->head_v_dim < 1)
    return fail(RS_ERR_INVALID_ARGUMENT, "bad sizes (H %lld must divide HV %lld)", (long long)a->num_k_heads,
                (long long)a->num_v_heads);
  if (!standard && (a->buffer_len < 1 || a->buffer_len > 64))
    return fail(RS_ERR_INVALID_ARGUMENT, "buffer_len %lld outside [1, 64]", (long long)a->buffer_len);
  /* The pool the Python entry point takes (check_gdn_state_pool): each slot's (HV, V, K) block
   * packed. The standard kernel's row stride is a compile-time constant, K. */
  if (a->stride_state[2] != a->head_k_dim || a->stride_state[1] != a->head_v_dim * a->head_k_dim ||
      a->stride_state[0] < a->num_v_heads * a->head_v_dim * a->head_k_dim)
    return fail(RS_ERR_UNSUPPORTED, "state strides (%lld, %lld, %lld): each slot's (HV, V, K) block must be packed",
                (long long)a->stride_state[0], (long long)a->stride_state[1], (long long)a->stride_state[2]);
  if (a->batch == 0) return RS_SUCCESS;
  /* 0: the default 1/sqrt(K), as the Python entry point's None (a zero scale would zero every output) */
  const double scale = a->scale != 0.f ? a->scale : 1.0 / sqrt((double)a->head_k_dim);
  char key[256];
  /* (the standard route has no ring: its key names none, as its L is 0) */
  snprintf(key, sizeof key, "gdn_step|H=%lld|HV=%lld|K=%lld|L=%lld|V=%lld|act=%s|ff=%d|ring=%s|route=%s|state=%s",
           (long long)a->num_k_heads, (long long)a->num_v_heads, (long long)a->head_k_dim,
           standard ? 0LL : (long long)a->buffer_len, (long long)a->head_v_dim, ad,
           (!standard && a->force_flush) ? 1 : 0, standard ? "none" : rd, route, sd);
  const int64_t cursor_len = standard ? 0 : a->route == RS_ROUTE_STANDARD_STEP ? 1 : a->buffer_len;
  static const char* const names[] = {GDN_VALUES(NAME_OF)};
  const rs_value values[] = {GDN_VALUES(VALUE_OF)};
  const named_values nv = {names, values, COUNT_OF(names)};
  return launch_step_case(key, a->batch, a->head_v_dim, a->num_v_heads, &nv, (CUstream)stream);
}

/* ---- speculative verify ------------------------------------------------------------ */
static int check_spec_sizes(int64_t T, int64_t history) {
  if (T < 1 || T > 8) return fail(RS_ERR_INVALID_ARGUMENT, "num_tokens %lld outside [1, 8]", (long long)T);
  if (history < T || history > 64)
    return fail(RS_ERR_INVALID_ARGUMENT, "history_len %lld outside [T=%lld, 64]", (long long)history, (long long)T);
  return RS_SUCCESS;
}

#define MAMBA2_SPEC_VALUES(X)                                                                                 \
  X(state_ptr, PTR(a->state)) X(x_ring_ptr, PTR(a->x_ring)) X(dt_ring_ptr, PTR(a->dt_ring))                    \
  X(B_ring_ptr, PTR(a->B_ring)) X(wp_ptr, PTR(a->write_pos)) X(origin_ptr, PTR(a->origin))                     \
  X(flush_ptr, PTR(a->is_flush)) X(x_ptr, PTR(a->x)) X(dt_ptr, PTR(a->dt)) X(A_ptr, PTR(a->A))                   \
  X(batch, INT(a->batch))                                                                                     \
  X(B_ptr, PTR(a->B)) X(C_ptr, PTR(a->C)) X(D_ptr, PTR(a->D)) X(z_ptr, PTR(a->z ? a->z : a->x))                 \
  X(dt_bias_ptr, PTR(a->dt_bias)) X(out_ptr, PTR(a->out)) X(slot_idx_ptr, PTR(a->slot_idx))                    \
  X(part_ptr, PTR(a->workspace))                                                                               \
  X(decay_ptr, PTR((char*)a->workspace + spec_part_bytes(a->batch, a->num_tokens, a->nheads, a->headdim)))     \
  X(nheads, INT(a->nheads)) X(num_slots, INT(a->num_slots)) X(headdim, INT(a->headdim)) X(dstate, INT(a->dstate)) \
  X(heads_per_group, INT(a->nheads / a->ngroups)) X(capacity, INT(a->history_len + a->num_tokens))             \
  X(pad_slot_id, INT(a->pad_slot_id)) X(stride_state_slot, INT(a->stride_state[0]))                            \
  X(stride_state_h, INT(a->stride_state[1])) X(stride_state_p, INT(a->stride_state[2]))                        \
  X(stride_xr_slot, INT(a->stride_x_ring[0])) X(stride_xr_h, INT(a->stride_x_ring[1]))                         \
  X(stride_xr_l, INT(a->stride_x_ring[2])) X(stride_dtr_slot, INT(a->stride_dt_ring[0]))                       \
  X(stride_dtr_h, INT(a->stride_dt_ring[1])) X(stride_Br_slot, INT(a->stride_B_ring[0]))                       \
  X(stride_Br_g, INT(a->stride_B_ring[1])) X(stride_Br_l, INT(a->stride_B_ring[2]))                            \
  X(stride_x_b, INT(a->stride_x[0])) X(stride_x_t, INT(a->stride_x[1])) X(stride_x_h, INT(a->stride_x[2]))       \
  X(stride_dt_b, INT(a->stride_dt[0])) X(stride_dt_t, INT(a->stride_dt[1])) X(stride_dt_h, INT(a->stride_dt[2])) \
  X(stride_A_h, INT(a->stride_A)) X(stride_B_b, INT(a->stride_B[0])) X(stride_B_t, INT(a->stride_B[1]))          \
  X(stride_B_g, INT(a->stride_B[2])) X(stride_C_b, INT(a->stride_C[0])) X(stride_C_t, INT(a->stride_C[1]))       \
  X(stride_C_g, INT(a->stride_C[2])) X(stride_D_h, INT(a->stride_D[0])) X(stride_D_p, INT(a->stride_D[1]))       \
  X(stride_z_b, INT(a->z ? a->stride_z[0] : 0)) X(stride_z_t, INT(a->z ? a->stride_z[1] : 0))                  \
  X(stride_z_h, INT(a->z ? a->stride_z[2] : 0)) X(stride_dtb_h, INT(a->stride_dt_bias))                        \
  X(stride_out_b, INT(a->stride_out[0])) X(stride_out_t, INT(a->stride_out[1])) X(stride_out_h, INT(a->stride_out[2]))

/* The workspace: fp32 [batch, T, H, P] (the outputs' part without the state's product), then
 * fp32 [batch, T, H] (the state's decay per token); ops/mamba2/spec.py, spec_workspace_numel. */
static int64_t spec_part_bytes(int64_t batch, int64_t num_tokens, int64_t nheads, int64_t headdim) {
  return 4 * batch * num_tokens * nheads * headdim;
}

int64_t rs_mamba2_spec_workspace_size(int64_t batch, int64_t num_tokens, int64_t nheads, int64_t headdim) {
  return spec_part_bytes(batch, num_tokens, nheads, headdim) + 4 * batch * num_tokens * nheads; /* part, decay */
}

int rs_mamba2_spec_verify(const rs_mamba2_spec_args* a, void* stream) {
  if (!a) return fail(RS_ERR_INVALID_ARGUMENT, "args is NULL");
  const char* sd = dtype_name(a->state_dtype);
  const char* ad = dtype_name(a->act_dtype);
  if (!sd || !ad) return fail(RS_ERR_INVALID_ARGUMENT, "unknown dtype");
  if (!a->state || !a->x || !a->dt || !a->A || !a->B || !a->C || !a->out || !a->x_ring || !a->dt_ring || !a->B_ring ||
      !a->write_pos || !a->origin || !a->is_flush)
    return fail(RS_ERR_INVALID_ARGUMENT, "a required pointer is NULL");
  if (!a->workspace)
    return fail(RS_ERR_INVALID_ARGUMENT, "workspace is NULL (it needs rs_mamba2_spec_workspace_size bytes)");
  if (!a->D || !a->dt_bias || !a->slot_idx || !a->dt_softplus)
    return fail(RS_ERR_UNSUPPORTED, "the AOT build covers TensorRT-LLM's call: D, dt_bias, slot_idx, dt_softplus");
  int status = check_spec_sizes(a->num_tokens, a->history_len);
  if (status != RS_SUCCESS) return status;
  if (a->batch < 0 || a->num_slots < 1 || a->nheads < 1 || a->ngroups < 1 || a->nheads % a->ngroups != 0)
    return fail(RS_ERR_INVALID_ARGUMENT, "bad sizes");
  if (a->batch == 0) return RS_SUCCESS;
  char key[256];
  snprintf(key, sizeof key, "mamba2_spec|Bh=%lld|G=%lld|H=%lld|N=%lld|P=%lld|T=%lld|act=%s|state=%s|z=%d",
           (long long)a->history_len, (long long)a->ngroups, (long long)a->nheads, (long long)a->dstate,
           (long long)a->headdim, (long long)a->num_tokens, ad, sd, a->z ? 1 : 0);
  static const char* const names[] = {MAMBA2_SPEC_VALUES(NAME_OF)};
  const rs_value values[] = {MAMBA2_SPEC_VALUES(VALUE_OF)};
  const named_values nv = {names, values, COUNT_OF(names)};
  return launch_step_case(key, a->batch, a->headdim, a->nheads, &nv, (CUstream)stream);
}

#define GDN_SPEC_VALUES(X)                                                                                    \
  X(state_ptr, PTR(a->state)) X(d_ring_ptr, PTR(a->d_ring)) X(k_ring_ptr, PTR(a->k_ring))                      \
  X(g_ring_ptr, PTR(a->g_ring)) X(wp_ptr, PTR(a->write_pos)) X(origin_ptr, PTR(a->origin))                     \
  X(flush_ptr, PTR(a->is_flush)) X(q_ptr, PTR(a->q)) X(k_ptr, PTR(a->k)) X(v_ptr, PTR(a->v)) X(a_ptr, PTR(a->a))  \
  X(b_ptr, PTR(a->b)) X(A_log_ptr, PTR(a->A_log)) X(dt_bias_ptr, PTR(a->dt_bias)) X(out_ptr, PTR(a->out))       \
  X(slot_idx_ptr, PTR(a->slot_idx)) X(num_slots, INT(a->num_slots)) X(num_tokens, INT(a->num_tokens))          \
  X(head_k_dim, INT(a->head_k_dim)) X(head_v_dim, INT(a->head_v_dim))                                          \
  X(v_heads_per_k_head, INT(a->num_v_heads / a->num_k_heads)) X(capacity, INT(a->history_len + a->num_tokens)) \
  X(pad_slot_id, INT(a->pad_slot_id)) X(stride_state_slot, INT(a->stride_state[0]))                            \
  X(stride_state_h, INT(a->stride_state[1])) X(stride_state_v, INT(a->stride_state[2]))                        \
  X(stride_dr_slot, INT(a->stride_d_ring[0])) X(stride_dr_h, INT(a->stride_d_ring[1]))                         \
  X(stride_dr_l, INT(a->stride_d_ring[2])) X(stride_kr_slot, INT(a->stride_k_ring[0]))                         \
  X(stride_kr_h, INT(a->stride_k_ring[1])) X(stride_kr_l, INT(a->stride_k_ring[2]))                            \
  X(stride_gr_slot, INT(a->stride_g_ring[0])) X(stride_gr_h, INT(a->stride_g_ring[1]))                         \
  X(stride_q_b, INT(a->stride_q[0])) X(stride_q_t, INT(a->stride_q[1])) X(stride_q_h, INT(a->stride_q[2]))       \
  X(stride_k_b, INT(a->stride_k[0])) X(stride_k_t, INT(a->stride_k[1])) X(stride_k_h, INT(a->stride_k[2]))       \
  X(stride_v_b, INT(a->stride_v[0])) X(stride_v_t, INT(a->stride_v[1])) X(stride_v_h, INT(a->stride_v[2]))       \
  X(stride_a_b, INT(a->stride_a[0])) X(stride_a_t, INT(a->stride_a[1])) X(stride_a_h, INT(a->stride_a[2]))       \
  X(stride_b_b, INT(a->stride_b[0])) X(stride_b_t, INT(a->stride_b[1])) X(stride_b_h, INT(a->stride_b[2]))       \
  X(stride_out_b, INT(a->stride_out[0])) X(stride_out_t, INT(a->stride_out[1])) X(stride_out_h, INT(a->stride_out[2])) \
  X(scale, FLT(scale)) X(softplus_beta, FLT(a->softplus_beta)) X(softplus_threshold, FLT(a->softplus_threshold))     \
  X(solve_ptr, PTR(a->workspace)) X(num_v_heads, INT(a->num_v_heads))                                         \
  X(bias_ptr, PTR((char*)a->workspace + gdn_spec_solve_bytes(a->batch, a->num_v_heads)))

/* The workspace: fp32 [batch, HV, 16, 16] (the drafts' solve), then fp32 [batch, HV, 2T, V]
 * (the ring part's bias); ops/gdn/spec.py, gdn_spec_workspace_numel. */
static int64_t gdn_spec_solve_bytes(int64_t batch, int64_t num_v_heads) { return 4 * batch * num_v_heads * 256; }

int64_t rs_gdn_spec_workspace_size(int64_t batch, int64_t num_tokens, int64_t num_v_heads, int64_t head_v_dim) {
  return gdn_spec_solve_bytes(batch, num_v_heads) + 4 * batch * num_v_heads * 2 * num_tokens * head_v_dim;
}

int rs_gdn_spec_verify(const rs_gdn_spec_args* a, void* stream) {
  if (!a) return fail(RS_ERR_INVALID_ARGUMENT, "args is NULL");
  const char* sd = dtype_name(a->state_dtype);
  const char* ad = dtype_name(a->act_dtype);
  if (!sd || !ad) return fail(RS_ERR_INVALID_ARGUMENT, "unknown dtype");
  if (!a->state || !a->q || !a->k || !a->v || !a->a || !a->b || !a->A_log || !a->dt_bias || !a->out || !a->d_ring ||
      !a->k_ring || !a->g_ring || !a->write_pos || !a->origin || !a->is_flush)
    return fail(RS_ERR_INVALID_ARGUMENT, "a required pointer is NULL");
  if (!a->workspace)
    return fail(RS_ERR_INVALID_ARGUMENT, "workspace is NULL (it needs rs_gdn_spec_workspace_size bytes)");
  if (!a->slot_idx) return fail(RS_ERR_UNSUPPORTED, "the AOT build covers calls with slot indices");
  int status = check_spec_sizes(a->num_tokens, a->history_len);
  if (status != RS_SUCCESS) return status;
  if (a->batch < 0 || a->num_slots < 1 || a->num_k_heads < 1 || a->num_v_heads % a->num_k_heads != 0 ||
      a->head_k_dim < 1)
    return fail(RS_ERR_INVALID_ARGUMENT, "bad sizes (H %lld must divide HV %lld)", (long long)a->num_k_heads,
                (long long)a->num_v_heads);
  if (a->batch == 0) return RS_SUCCESS;
  const double scale = a->scale != 0.f ? a->scale : 1.0 / sqrt((double)a->head_k_dim);
  char key[256];
  snprintf(key, sizeof key, "gdn_spec|Bh=%lld|H=%lld|HV=%lld|K=%lld|T=%lld|V=%lld|act=%s|state=%s",
           (long long)a->history_len, (long long)a->num_k_heads, (long long)a->num_v_heads, (long long)a->head_k_dim,
           (long long)a->num_tokens, (long long)a->head_v_dim, ad, sd);
  static const char* const names[] = {GDN_SPEC_VALUES(NAME_OF)};
  const rs_value values[] = {GDN_SPEC_VALUES(VALUE_OF)};
  const named_values nv = {names, values, COUNT_OF(names)};
  return launch_step_case(key, a->batch, a->head_v_dim, a->num_v_heads, &nv, (CUstream)stream);
}

/* ---- cursors --------------------------------------------------------------------------- */
static int launch_cursor_case(const char* key, int64_t rows, const named_values* nv, CUstream stream) {
  int arch = 0, status = device_arch(stream, &arch);
  if (status != RS_SUCCESS) return status;
  const rs_case_desc* c;
  if ((status = find_case(arch, key, 1, &c)) != RS_SUCCESS) return status;
  const rs_kernel_desc* d = &rs_kernels[c->launches[0]];
  return launch_named(c->launches[0], cdiv(rows, d->block), 1, 1, nv, stream);
}

int rs_advance_write_pos(int32_t* write_pos, int64_t num_slots, int64_t buffer_len, const int32_t* slot_idx,
                         const int8_t* force_flush, int64_t batch, int64_t pad_slot_id, int flush_all, void* stream) {
  if (!write_pos || !slot_idx) return fail(RS_ERR_INVALID_ARGUMENT, "write_pos and slot_idx are required");
  if (num_slots < 1 || batch < 0 || buffer_len < 1 || buffer_len > 64)
    return fail(RS_ERR_INVALID_ARGUMENT, "bad sizes (slots %lld, batch %lld, L %lld)", (long long)num_slots,
                (long long)batch, (long long)buffer_len);
  if (batch == 0) return RS_SUCCESS;
  char key[128];
  snprintf(key, sizeof key, "advance_write_pos|L=%lld|ff=%d|flush_all=%d", (long long)buffer_len, force_flush ? 1 : 0,
           flush_all ? 1 : 0);
  static const char* const names[] = {"write_pos_ptr", "slot_idx_ptr", "force_flush_ptr", "batch", "num_slots",
                                      "buffer_len", "pad_slot_id"};
  const rs_value values[] = {PTR(write_pos), PTR(slot_idx), PTR(force_flush ? (const void*)force_flush : (const void*)write_pos),
                             INT(batch), INT(num_slots), INT(buffer_len), INT(pad_slot_id)};
  const named_values nv = {names, values, COUNT_OF(names)};
  return launch_cursor_case(key, batch, &nv, (CUstream)stream);
}

int rs_reset_write_pos(int32_t* write_pos, int64_t num_slots, const int32_t* slots, int64_t n, int64_t pad_slot_id,
                       void* stream) {
  if (!write_pos || !slots) return fail(RS_ERR_INVALID_ARGUMENT, "write_pos and slots are required");
  if (num_slots < 1 || n < 0) return fail(RS_ERR_INVALID_ARGUMENT, "bad sizes");
  if (n == 0) return RS_SUCCESS;
  static const char* const names[] = {"write_pos_ptr", "slots_ptr", "n", "num_slots", "pad_slot_id"};
  const rs_value values[] = {PTR(write_pos), PTR(slots), INT(n), INT(num_slots), INT(pad_slot_id)};
  const named_values nv = {names, values, COUNT_OF(names)};
  return launch_cursor_case("reset_write_pos", n, &nv, (CUstream)stream);
}

int rs_commit_spec(int32_t* write_pos, int32_t* origin, int8_t* is_flush, int64_t num_slots, const int32_t* accepted,
                   const int32_t* slot_idx, int64_t batch, int64_t num_tokens, int64_t history_len, int64_t pad_slot_id,
                   void* stream) {
  if (!write_pos || !origin || !is_flush || !accepted || !slot_idx)
    return fail(RS_ERR_INVALID_ARGUMENT, "cursors, accepted and slot_idx are required");
  int status = check_spec_sizes(num_tokens, history_len);
  if (status != RS_SUCCESS) return status;
  if (num_slots < 1 || batch < 0) return fail(RS_ERR_INVALID_ARGUMENT, "bad sizes");
  if (batch == 0) return RS_SUCCESS;
  char key[96];
  snprintf(key, sizeof key, "commit_spec|Bh=%lld|T=%lld", (long long)history_len, (long long)num_tokens);
  static const char* const names[] = {"wp_ptr", "origin_ptr", "flush_ptr", "accepted_ptr", "slot_idx_ptr", "batch",
                                      "num_slots", "num_tokens", "capacity", "pad_slot_id"};
  const rs_value values[] = {PTR(write_pos), PTR(origin), PTR(is_flush), PTR(accepted), PTR(slot_idx), INT(batch),
                             INT(num_slots), INT(num_tokens), INT(history_len + num_tokens), INT(pad_slot_id)};
  const named_values nv = {names, values, COUNT_OF(names)};
  return launch_cursor_case(key, batch, &nv, (CUstream)stream);
}

int rs_reset_spec(int32_t* write_pos, int32_t* origin, int8_t* is_flush, int64_t num_slots, const int32_t* slots,
                  int64_t n, int64_t num_tokens, int64_t history_len, int64_t pad_slot_id, void* stream) {
  if (!write_pos || !origin || !is_flush || !slots) return fail(RS_ERR_INVALID_ARGUMENT, "cursors and slots are required");
  int status = check_spec_sizes(num_tokens, history_len);
  if (status != RS_SUCCESS) return status;
  if (num_slots < 1 || n < 0) return fail(RS_ERR_INVALID_ARGUMENT, "bad sizes");
  if (n == 0) return RS_SUCCESS;
  char key[96];
  snprintf(key, sizeof key, "reset_spec|Bh=%lld|T=%lld", (long long)history_len, (long long)num_tokens);
  static const char* const names[] = {"wp_ptr", "origin_ptr", "flush_ptr", "slots_ptr", "n", "num_slots", "num_tokens",
                                      "capacity", "pad_slot_id"};
  const rs_value values[] = {PTR(write_pos), PTR(origin), PTR(is_flush), PTR(slots), INT(n), INT(num_slots),
                             INT(num_tokens), INT(history_len + num_tokens), INT(pad_slot_id)};
  const named_values nv = {names, values, COUNT_OF(names)};
  return launch_cursor_case(key, n, &nv, (CUstream)stream);
}

/* ---- introspection ------------------------------------------------------------------- */
int rs_num_kernels(void) { return rs_num_kernels_built; }
const char* rs_kernel_key(int i) { return i >= 0 && i < rs_num_kernels_built ? rs_kernels[i].key : NULL; }
int rs_kernel_arch(int i) { return i >= 0 && i < rs_num_kernels_built ? rs_kernels[i].arch : -1; }
int rs_kernel_programmatic(int i) { return i >= 0 && i < rs_num_kernels_built ? rs_kernels[i].programmatic : 0; }

int rs_set_programmatic_launches(int enabled) {
  pthread_mutex_lock(&g_lock);
  int previous = g_programmatic < 0 ? programmatic_from_env() : g_programmatic;
  g_programmatic = enabled ? 1 : 0;
  pthread_mutex_unlock(&g_lock);
  return previous;
}
int rs_has_arch(int arch) {
  for (int i = 0; i < rs_num_kernels_built; ++i)
    if (rs_kernels[i].arch == arch) return 1;
  return 0;
}
const char* rs_table_tag(int arch) {
  for (int i = 0; i < rs_num_tables; ++i)
    if (rs_tables[i].arch == arch) return rs_tables[i].tag;
  return NULL;
}
