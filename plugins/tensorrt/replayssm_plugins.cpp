/*
 * TensorRT IPluginV3 plugins over libreplayssm_kernels (one source for TensorRT 10.x and 11.x):
 *
 *   ReplaySSMMamba2Step   one Mamba2 decode step (replay routes, standard_step, always_flush)
 *   ReplaySSMGDNStep      one Gated DeltaNet decode step
 *   ReplaySSMAdvance      the cursor advance after every layer of a step
 *   ReplaySSMReset        slots entering decode: their rings emptied (cursors to 0)
 *
 * Namespace "replayssm", version "1". State, rings and cursors are in-place tensors: each is
 * an input with an aliased output (IPluginV3OneBuildV2::getAliasedInput; the builder needs
 * PreviewFeature::kALIASED_PLUGIN_IO_10_03). The Mamba2 step can instead own its rings and
 * cursors (field owns_rings = 1, with max_slots and buffer_len): device memory keyed by slot,
 * allocated at the first enqueue, so an engine whose runtime knows only the SSM state (the
 * TensorRT-LLM <= 1.2 engine path) needs no extra engine inputs; examples/trtllm_build says
 * why and what it costs.
 *
 * The library exports getCreators() for IPluginRegistry::loadLibrary and needs no nvinfer.
 */
#include "NvInferRuntime.h"
#include "replayssm_kernels.h"
#include "replayssm_plugin_shapes.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using namespace nvinfer1;
using replayssm::Kind;
using replayssm::Params;

namespace {

constexpr char const* kNamespace = "replayssm";
constexpr char const* kVersion = "1";
constexpr int kReported = -1;  // an error the plugin itself printed (not one of the C library's rs_status)

/* In-place tensors: output index -> aliased input index. */
struct Alias {
  int32_t output, input;
};

/* Strides of a dense row-major tensor, in elements. */
int64_t stride(Dims const& d, int32_t axis) {
  int64_t s = 1;
  for (int32_t i = axis + 1; i < d.nbDims; ++i) s *= d.d[i];
  return s;
}

int32_t rsDtype(DataType t) {
  return t == DataType::kFLOAT ? RS_DTYPE_FP32 : t == DataType::kBF16 ? RS_DTYPE_BF16 : RS_DTYPE_FP16;
}

bool isAct(DataType t) { return t == DataType::kBF16 || t == DataType::kHALF; }

class ReplaySSMPlugin : public IPluginV3, public IPluginV3OneCore, public IPluginV3OneBuildV2, public IPluginV3OneRuntime {
 public:
  ReplaySSMPlugin(Kind kind, Params const& p) : mKind(kind), mP(p) { buildFields(); }
  ~ReplaySSMPlugin() override { releaseRings(); }

  // ---- IPluginV3 ---------------------------------------------------------------------
  IPluginCapability* getCapabilityInterface(PluginCapabilityType type) noexcept override {
    switch (type) {
      case PluginCapabilityType::kBUILD: return static_cast<IPluginV3OneBuildV2*>(this);
      case PluginCapabilityType::kRUNTIME: return static_cast<IPluginV3OneRuntime*>(this);
      case PluginCapabilityType::kCORE: return static_cast<IPluginV3OneCore*>(this);
    }
    return nullptr;
  }
  IPluginV3* clone() noexcept override { return new ReplaySSMPlugin(mKind, mP); }  // rings are not shared

  // ---- IPluginV3OneCore ----------------------------------------------------------------
  char const* getPluginName() const noexcept override { return pluginName(mKind); }
  char const* getPluginVersion() const noexcept override { return kVersion; }
  char const* getPluginNamespace() const noexcept override { return kNamespace; }

  static char const* pluginName(Kind k) {
    switch (k) {
      case Kind::kMamba2Step: return "ReplaySSMMamba2Step";
      case Kind::kGDNStep: return "ReplaySSMGDNStep";
      case Kind::kAdvance: return "ReplaySSMAdvance";
      default: return "ReplaySSMReset";
    }
  }

  // ---- inputs and outputs (replayssm_plugin_shapes.h lists them) -------------------------
  int32_t numInputs() const { return static_cast<int32_t>(replayssm::inputLayouts(mKind, mP).size()); }
  bool cursorsOnly() const { return mKind == Kind::kAdvance || mKind == Kind::kReset; }
  std::vector<Alias> aliases() const {
    if (cursorsOnly()) return {{0, 0}};
    if (mKind == Kind::kMamba2Step && mP.owns_rings) return {{1, 0}};
    return {{1, 0}, {2, 9}, {3, 10}, {4, 11}};  // state and the three rings (not the cursors: read only here)
  }
  int32_t getNbOutputs() const noexcept override {
    return static_cast<int32_t>(aliases().size()) + (cursorsOnly() ? 0 : 1);
  }
  int32_t getAliasedInput(int32_t outputIndex) noexcept override {
    for (auto const& a : aliases())
      if (a.output == outputIndex) return a.input;
    return -1;
  }
  int32_t inputOf(int32_t output) const {
    for (auto const& a : aliases())
      if (a.output == output) return a.input;
    return 1;  // the step output has the shape and type of x / v
  }

  int32_t getOutputDataTypes(DataType* outputTypes, int32_t nbOutputs, DataType const* inputTypes,
                             int32_t nbInputs) const noexcept override {
    if (nbInputs != numInputs()) return -1;
    for (int32_t o = 0; o < nbOutputs; ++o) outputTypes[o] = inputTypes[mKind == Kind::kGDNStep && o == 0 ? 3 : inputOf(o)];
    return 0;
  }

  int32_t getOutputShapes(DimsExprs const* inputs, int32_t nbInputs, DimsExprs const*, int32_t, DimsExprs* outputs,
                          int32_t nbOutputs, IExprBuilder&) noexcept override {
    if (nbInputs != numInputs()) return -1;
    for (int32_t o = 0; o < nbOutputs; ++o) outputs[o] = inputs[mKind == Kind::kGDNStep && o == 0 ? 3 : inputOf(o)];
    return 0;
  }

  bool supportsFormatCombination(int32_t pos, DynamicPluginTensorDesc const* inOut, int32_t nbInputs,
                                 int32_t) noexcept override {
    PluginTensorDesc const& d = inOut[pos].desc;
    if (d.format != TensorFormat::kLINEAR) return false;
    if (pos >= nbInputs) {  // outputs: the type of what they alias (or of x / v)
      int32_t o = pos - nbInputs;
      int32_t src = mKind == Kind::kGDNStep && o == 0 ? 3 : inputOf(o);
      return src < pos && d.type == inOut[src].desc.type;
    }
    DataType const t = d.type;
    bool const stateOk = t == DataType::kFLOAT || t == DataType::kBF16;
    auto act = [&](int32_t ref) { return isAct(t) && (ref < 0 || t == inOut[ref].desc.type); };
    if (mKind == Kind::kAdvance) return pos == 2 ? t == DataType::kINT8 : t == DataType::kINT32;
    if (mKind == Kind::kReset) return t == DataType::kINT32;
    if (mKind == Kind::kMamba2Step) {
      int32_t const z = mP.owns_rings ? 9 : 13;
      switch (pos) {
        case 0: return stateOk;
        case 1: return act(-1);
        case 2: case 4: case 5: return act(1);
        case 3: case 6: case 7: return t == DataType::kFLOAT;
        case 8: return t == DataType::kINT32;
        default: break;
      }
      if (!mP.owns_rings && pos <= 12) return pos == 10 ? t == DataType::kFLOAT : pos == 12 ? t == DataType::kINT32 : act(1);
      if (mP.has_z && pos == z) return act(1);
      if (mP.has_reset && pos == nbInputs - 1) return t == DataType::kINT32;  // new_slots
      return t == DataType::kINT8;  // force_flush
    }
    switch (pos) {  // GDN
      case 0: return stateOk;
      case 1: return act(-1);
      case 2: case 3: case 4: case 5: return act(1);
      case 6: case 7: case 11: return t == DataType::kFLOAT;
      // the d and k rings: bf16 beside a bf16 state, else fp32 (cache.gdn_ring_dtype: the only pairs built)
      case 9: return t == (inOut[0].desc.type == DataType::kBF16 ? DataType::kBF16 : DataType::kFLOAT);
      case 10: return t == inOut[9].desc.type;
      case 8: case 12: return t == DataType::kINT32;
      default: return t == DataType::kINT8;
    }
  }

  // Shapes are checked where TensorRT tells them: at build time (dims not known yet are -1)
  // and before the launches that follow a shape change.
  int32_t configurePlugin(DynamicPluginTensorDesc const* in, int32_t nbInputs, DynamicPluginTensorDesc const*,
                          int32_t) noexcept override {
    std::vector<replayssm::Shape> shapes;
    for (int32_t i = 0; i < nbInputs; ++i) shapes.push_back({in[i].desc.dims.nbDims, in[i].desc.dims.d});
    return checkShapes(shapes);
  }

  // ---- IPluginV3OneRuntime ---------------------------------------------------------------
  int32_t onShapeChange(PluginTensorDesc const* in, int32_t nbInputs, PluginTensorDesc const*, int32_t) noexcept override {
    std::vector<replayssm::Shape> shapes;
    for (int32_t i = 0; i < nbInputs; ++i) shapes.push_back({in[i].dims.nbDims, in[i].dims.d});
    return checkShapes(shapes);
  }
  IPluginV3* attachToContext(IPluginResourceContext*) noexcept override { return clone(); }
  PluginFieldCollection const* getFieldsToSerialize() noexcept override { return &mFC; }

  int32_t enqueue(PluginTensorDesc const* in, PluginTensorDesc const* out, void const* const* inputs,
                  void* const* outputs, void*, cudaStream_t stream) noexcept override {
    int status;
    switch (mKind) {
      case Kind::kMamba2Step: status = enqueueMamba2(in, inputs, outputs, stream); break;
      case Kind::kGDNStep: status = enqueueGDN(in, inputs, outputs, stream); break;
      case Kind::kReset:
        status = rs_reset_write_pos(static_cast<int32_t*>(outputs[0]), in[0].dims.d[0],
                                    static_cast<int32_t const*>(inputs[1]), in[1].dims.d[0], mP.pad_slot_id, stream);
        break;
      default:
        status = rs_advance_write_pos(static_cast<int32_t*>(outputs[0]), in[0].dims.d[0], mP.buffer_len,
                                      static_cast<int32_t const*>(inputs[1]),
                                      mP.has_force_flush ? static_cast<int8_t const*>(inputs[2]) : nullptr,
                                      in[1].dims.d[0], mP.pad_slot_id, mP.flush_all, stream);
    }
    (void)out;
    if (status == kReported) return -1;
    if (status != RS_SUCCESS) {
      std::fprintf(stderr, "[replayssm] %s: %s: %s\n", pluginName(mKind), rs_status_string(status), rs_last_error_message());
      return -1;
    }
    return 0;
  }

 private:
  int32_t checkShapes(std::vector<replayssm::Shape> const& shapes) const {
    std::string const bad = replayssm::checkShapes(mKind, mP, shapes.data(), static_cast<int32_t>(shapes.size()));
    if (bad.empty()) return 0;
    std::fprintf(stderr, "[replayssm] %s: %s\n", pluginName(mKind), bad.c_str());
    return -1;
  }

  int enqueueMamba2(PluginTensorDesc const* in, void const* const* inputs, void* const* outputs, cudaStream_t stream) {
    Dims const& st = in[0].dims;  // (slots, H, P, N)
    Dims const& x = in[1].dims;   // (B, H, P)
    Dims const& B = in[4].dims;   // (B, G, N)
    rs_mamba2_step_args a{};
    a.state = outputs[1];  // aliased with input 0
    a.x = inputs[1]; a.dt = inputs[2]; a.A = static_cast<float const*>(inputs[3]); a.B = inputs[4]; a.C = inputs[5];
    a.D = static_cast<float const*>(inputs[6]); a.dt_bias = static_cast<float const*>(inputs[7]);
    a.slot_idx = static_cast<int32_t const*>(inputs[8]); a.out = outputs[0];
    a.batch = x.d[0]; a.num_slots = st.d[0]; a.nheads = x.d[1]; a.headdim = x.d[2]; a.dstate = st.d[3]; a.ngroups = B.d[1];
    a.pad_slot_id = mP.pad_slot_id; a.dt_softplus = 1; a.route = mP.route;
    a.state_dtype = rsDtype(in[0].type); a.act_dtype = rsDtype(in[1].type);
    for (int i = 0; i < 3; ++i) a.stride_state[i] = stride(st, i);
    a.stride_x[0] = stride(x, 0); a.stride_x[1] = stride(x, 1);
    a.stride_dt[0] = stride(in[2].dims, 0); a.stride_dt[1] = 1;
    a.stride_A = 1; a.stride_D[0] = 1; a.stride_D[1] = 0; a.stride_dt_bias = 1;  // per head
    a.stride_B[0] = stride(B, 0); a.stride_B[1] = stride(B, 1);
    a.stride_C[0] = stride(in[5].dims, 0); a.stride_C[1] = stride(in[5].dims, 1);
    a.stride_out[0] = a.stride_x[0]; a.stride_out[1] = a.stride_x[1];
    int32_t next = 9;
    if (mP.owns_rings) {
      if (mP.max_slots < a.num_slots) {  // (onShapeChange reports it first)
        std::fprintf(stderr, "[replayssm] %s: the state has %lld slots, more than max_slots %d\n", pluginName(mKind),
                     static_cast<long long>(a.num_slots), mP.max_slots);
        return kReported;
      }
      int status = ensureRings(a, in[1].type, stream);
      if (status != RS_SUCCESS) return status;
      a.x_cache = mXCache; a.dt_cache = static_cast<float*>(mDtCache); a.B_cache = mBCache; a.write_pos = mWritePos;
      // a.num_slots stays the state's: slots are range-checked against it (a row whose slot the
      // state does not have gets NaN and writes nothing), and the rings hold max_slots >= it.
      a.buffer_len = mP.buffer_len;
    } else {
      a.x_cache = outputs[2]; a.dt_cache = static_cast<float*>(outputs[3]); a.B_cache = outputs[4];
      a.write_pos = const_cast<int32_t*>(static_cast<int32_t const*>(inputs[12]));
      a.buffer_len = in[9].dims.d[2];
      next = 13;
    }
    int64_t const L = a.buffer_len;
    a.stride_x_cache[0] = a.nheads * L * a.headdim; a.stride_x_cache[1] = L * a.headdim; a.stride_x_cache[2] = a.headdim;
    a.stride_dt_cache[0] = a.nheads * L; a.stride_dt_cache[1] = L;
    a.stride_B_cache[0] = a.ngroups * L * a.dstate; a.stride_B_cache[1] = L * a.dstate; a.stride_B_cache[2] = a.dstate;
    if (mP.has_z) {
      a.z = inputs[next]; a.stride_z[0] = a.stride_x[0]; a.stride_z[1] = a.stride_x[1]; ++next;
    }
    if (mP.has_force_flush) a.force_flush = static_cast<int8_t const*>(inputs[next++]);
    int status = RS_SUCCESS;
    if (mP.owns_rings && mP.has_reset)  // slots entering decode (pad_slot_id elsewhere): empty rings
      status = rs_reset_write_pos(mWritePos, a.num_slots, static_cast<int32_t const*>(inputs[next]), a.batch,
                                  mP.pad_slot_id, stream);
    if (status == RS_SUCCESS) status = rs_mamba2_step(&a, stream);
    if (status == RS_SUCCESS && mP.owns_rings)  // owned cursors: this layer advances its own copy
      status = rs_advance_write_pos(mWritePos, a.num_slots, L, a.slot_idx, a.force_flush, a.batch, mP.pad_slot_id,
                                    mP.route == RS_ROUTE_STANDARD_STEP || mP.route == RS_ROUTE_ALWAYS_FLUSH, stream);
    return status;
  }

  int enqueueGDN(PluginTensorDesc const* in, void const* const* inputs, void* const* outputs, cudaStream_t stream) {
    Dims const& st = in[0].dims;  // (slots, HV, V, K)
    Dims const& q = in[1].dims;   // (B, H, K)
    Dims const& v = in[3].dims;   // (B, HV, V)
    rs_gdn_step_args a{};
    a.state = outputs[1]; a.q = inputs[1]; a.k = inputs[2]; a.v = inputs[3]; a.a = inputs[4]; a.b = inputs[5];
    a.A_log = static_cast<float const*>(inputs[6]); a.dt_bias = static_cast<float const*>(inputs[7]);
    a.slot_idx = static_cast<int32_t const*>(inputs[8]); a.out = outputs[0];
    a.d_cache = outputs[2]; a.k_cache = outputs[3];
    a.g_cache = static_cast<float*>(outputs[4]);
    a.write_pos = const_cast<int32_t*>(static_cast<int32_t const*>(inputs[12]));
    a.force_flush = mP.has_force_flush ? static_cast<int8_t const*>(inputs[13]) : nullptr;
    a.batch = q.d[0]; a.num_slots = st.d[0]; a.num_k_heads = q.d[1]; a.num_v_heads = v.d[1];
    a.head_k_dim = q.d[2]; a.head_v_dim = v.d[2]; a.buffer_len = in[9].dims.d[2]; a.pad_slot_id = mP.pad_slot_id;
    for (int i = 0; i < 3; ++i) {
      a.stride_state[i] = stride(st, i);
      a.stride_d_cache[i] = stride(in[9].dims, i);
      a.stride_k_cache[i] = stride(in[10].dims, i);
    }
    a.stride_g_cache[0] = stride(in[11].dims, 0); a.stride_g_cache[1] = stride(in[11].dims, 1);
    a.stride_q[0] = stride(q, 0); a.stride_q[1] = stride(q, 1);
    a.stride_k[0] = stride(in[2].dims, 0); a.stride_k[1] = stride(in[2].dims, 1);
    a.stride_v[0] = stride(v, 0); a.stride_v[1] = stride(v, 1);
    a.stride_a[0] = stride(in[4].dims, 0); a.stride_a[1] = 1; a.stride_b[0] = stride(in[5].dims, 0); a.stride_b[1] = 1;
    a.stride_out[0] = a.stride_v[0]; a.stride_out[1] = a.stride_v[1];
    a.scale = mP.scale; a.softplus_beta = 1.f; a.softplus_threshold = 20.f;
    a.state_dtype = rsDtype(in[0].type); a.act_dtype = rsDtype(in[1].type); a.route = mP.route;
    a.ring_dtype = rsDtype(in[9].type);
    return rs_gdn_step(&a, stream);
  }

  /* Owned rings: zeroed device memory for every slot of the pool, allocated once. */
  int ensureRings(rs_mamba2_step_args const& a, DataType act, cudaStream_t stream) {
    if (mXCache) return RS_SUCCESS;
    // Captured, the zeroing would become a node of the graph and empty every ring and cursor at
    // each replay (no checkpoint would ever be stored); TensorRT's own advice holds: enqueue once
    // before capturing.
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess || capture != cudaStreamCaptureStatusNone) {
      std::fprintf(stderr, "[replayssm] %s: the first enqueue allocates the rings and cannot be captured in a CUDA "
                   "graph: run the engine once before capturing\n", pluginName(mKind));
      return kReported;
    }
    size_t const e = act == DataType::kFLOAT ? 4 : 2, S = static_cast<size_t>(mP.max_slots), L = mP.buffer_len;
    size_t const sizes[4] = {S * a.nheads * L * a.headdim * e, S * a.nheads * L * 4, S * a.ngroups * L * a.dstate * e, S * 4};
    void** ptrs[4] = {&mXCache, &mDtCache, &mBCache, reinterpret_cast<void**>(&mWritePos)};
    for (int i = 0; i < 4; ++i) {
      cudaError_t err = cudaMalloc(ptrs[i], sizes[i]);
      if (err == cudaSuccess) err = cudaMemsetAsync(*ptrs[i], 0, sizes[i], stream);
      if (err != cudaSuccess) {
        std::fprintf(stderr, "[replayssm] %s: allocating %zu bytes of rings: %s\n", pluginName(mKind), sizes[i],
                     cudaGetErrorString(err));
        releaseRings();
        return kReported;
      }
    }
    return RS_SUCCESS;
  }
  void releaseRings() {
    for (void* p : {mXCache, mDtCache, mBCache, static_cast<void*>(mWritePos)})
      if (p) cudaFree(p);
    mXCache = mDtCache = mBCache = nullptr;
    mWritePos = nullptr;
  }

  void buildFields() {
    mFields.clear();
    auto i32 = [&](char const* name, int32_t* v) { mFields.emplace_back(name, v, PluginFieldType::kINT32, 1); };
    i32("route", &mP.route);
    i32("pad_slot_id", &mP.pad_slot_id);
    i32("has_z", &mP.has_z);
    i32("has_force_flush", &mP.has_force_flush);
    i32("owns_rings", &mP.owns_rings);
    i32("max_slots", &mP.max_slots);
    i32("buffer_len", &mP.buffer_len);
    i32("flush_all", &mP.flush_all);
    i32("has_reset", &mP.has_reset);
    mFields.emplace_back("scale", &mP.scale, PluginFieldType::kFLOAT32, 1);
    mFC.nbFields = static_cast<int32_t>(mFields.size());
    mFC.fields = mFields.data();
  }

  Kind mKind;
  Params mP;
  std::vector<PluginField> mFields;
  PluginFieldCollection mFC{};
  void* mXCache = nullptr;
  void* mDtCache = nullptr;
  void* mBCache = nullptr;
  int32_t* mWritePos = nullptr;
};

class ReplaySSMCreator : public IPluginCreatorV3One {
 public:
  explicit ReplaySSMCreator(Kind kind) : mKind(kind) {
    for (char const* name : {"route", "pad_slot_id", "has_z", "has_force_flush", "owns_rings", "max_slots", "buffer_len",
                             "flush_all", "has_reset"})
      mFieldNames.emplace_back(name, nullptr, PluginFieldType::kINT32, 1);
    mFieldNames.emplace_back("scale", nullptr, PluginFieldType::kFLOAT32, 1);
    mFC.nbFields = static_cast<int32_t>(mFieldNames.size());
    mFC.fields = mFieldNames.data();
  }

  IPluginV3* createPlugin(char const*, PluginFieldCollection const* fc, TensorRTPhase) noexcept override {
    Params p;
    for (int32_t i = 0; fc && i < fc->nbFields; ++i) {
      PluginField const& f = fc->fields[i];
      if (!f.data) continue;
      std::string const n = f.name;
      if (f.type == PluginFieldType::kFLOAT32 && n == "scale") {
        p.scale = *static_cast<float const*>(f.data);
        continue;
      }
      if (f.type != PluginFieldType::kINT32) continue;
      int32_t const v = *static_cast<int32_t const*>(f.data);
      if (n == "route") p.route = v;
      else if (n == "pad_slot_id") p.pad_slot_id = v;
      else if (n == "has_z") p.has_z = v;
      else if (n == "has_force_flush") p.has_force_flush = v;
      else if (n == "owns_rings") p.owns_rings = v;
      else if (n == "max_slots") p.max_slots = v;
      else if (n == "buffer_len") p.buffer_len = v;
      else if (n == "flush_all") p.flush_all = v;
      else if (n == "has_reset") p.has_reset = v;
    }
    if (p.route < RS_ROUTE_OUTPUT_ONLY || p.route > RS_ROUTE_STANDARD || p.buffer_len < 1 || p.buffer_len > 64 ||
        (p.owns_rings && (mKind != Kind::kMamba2Step || p.max_slots < 1)) || (p.has_reset && !p.owns_rings)) {
      std::fprintf(stderr,
                   "[replayssm] %s: bad plugin fields (route %d in [0, 3], buffer_len %d in [1, 64], owns_rings %d "
                   "(Mamba2 only) with max_slots %d >= 1, has_reset %d (with owns_rings only))\n",
                   ReplaySSMPlugin::pluginName(mKind), p.route, p.buffer_len, p.owns_rings, p.max_slots, p.has_reset);
      return nullptr;
    }
    return new ReplaySSMPlugin(mKind, p);
  }
  PluginFieldCollection const* getFieldNames() noexcept override { return &mFC; }
  char const* getPluginName() const noexcept override { return ReplaySSMPlugin::pluginName(mKind); }
  char const* getPluginVersion() const noexcept override { return kVersion; }
  char const* getPluginNamespace() const noexcept override { return kNamespace; }

 private:
  Kind mKind;
  std::vector<PluginField> mFieldNames;
  PluginFieldCollection mFC{};
};

}  // namespace

extern "C" __attribute__((visibility("default"))) IPluginCreatorInterface* const* getCreators(int32_t& nbCreators) {
  static ReplaySSMCreator mamba2(Kind::kMamba2Step), gdn(Kind::kGDNStep), advance(Kind::kAdvance), reset(Kind::kReset);
  static IPluginCreatorInterface* const creators[] = {&mamba2, &gdn, &advance, &reset};
  nbCreators = 4;
  return creators;
}
