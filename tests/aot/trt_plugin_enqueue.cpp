/*
 * Runs the ReplaySSM plugins' enqueue on the GPU outside TensorRT (its headers only).
 * tests/aot/test_aot_cuda.py writes the inputs of a few ring cycles and compares what this
 * writes back with the JIT kernels' steps.
 *
 *   trt_plugin_enqueue libreplayssm_trt_plugins.so mamba2|mamba2_net|gdn DIR
 *
 * mamba2: ReplaySSMMamba2Step in the form examples/trtllm_build builds (rings and cursors owned
 *   by the plugin; owns_rings, has_reset, has_z, route output_only). DIR/sizes.txt: "S B H P N
 *   G L T M" (slots, batch, heads, headdim, dstate, groups, ring length, steps, the rings'
 *   max_slots >= S); DIR holds
 *   state.bin (fp32 S*H*P*N), A.bin, D.bin, dt_bias.bin (fp32 H), y_init.bin (bf16 B*H*P) and
 *   for each step t: x_t.bin, z_t.bin (bf16 B*H*P), dt_t.bin (bf16 B*H), B_t.bin, C_t.bin
 *   (bf16 B*G*N), slot_t.bin, new_t.bin (int32 B).
 * mamba2_net: ReplaySSMMamba2Step on network rings with z and force_flush, then ReplaySSMAdvance
 *   with the same flags (and, at a step with a new_t.bin, ReplaySSMReset on those slots first).
 *   DIR/sizes.txt: "S B H P N G L T route state_bf16 flush_all" (flush_all: the advance's field,
 *   1 on the routes that store every row); DIR holds state.bin (fp32, or bf16 when
 *   state_bf16 is 1, S*H*P*N), x_cache.bin (bf16 S*H*L*P), dt_cache.bin (fp32 S*H*L),
 *   B_cache.bin (bf16 S*G*L*N), write_pos.bin (int32 S), A.bin, D.bin, dt_bias.bin, y_init.bin
 *   and each step's files as for mamba2, with flush_t.bin (int8 B) in place of new_t.bin.
 * gdn: ReplaySSMGDNStep on network rings, then ReplaySSMAdvance on the cursors (and, at a step
 *   with a new_t.bin (int32 B), ReplaySSMReset on those slots first). DIR/sizes.txt:
 *   "S B H HV K V L T state_bf16"; DIR holds state.bin (S*HV*V*K), d_cache.bin (S*HV*L*V),
 *   k_cache.bin (S*H*L*K), all three fp32, or bf16 when state_bf16 is 1; g_cache.bin (fp32
 *   S*HV*L), write_pos.bin (int32 S), A_log.bin, dt_bias.bin (fp32 HV), y_init.bin (bf16
 *   B*HV*V) and for each step t: q_t.bin, k_t.bin (bf16 B*H*K), v_t.bin (bf16 B*HV*V), a_t.bin,
 *   b_t.bin (bf16 B*HV), slot_t.bin (int32 B), and when flush_0.bin exists flush_t.bin (int8 B):
 *   the step and the advance then take force_flush.
 *
 * Writes y_t.bin after each step and, at the end, state_out.bin (on network rings also the
 * rings' and the cursors' *_out.bin). Exit 0 when every enqueue succeeded.
 */
#include "NvInferRuntime.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

using namespace nvinfer1;

namespace {

std::string dir;

std::vector<char> readFile(std::string const& name, size_t bytes) {
  std::ifstream f(dir + "/" + name, std::ios::binary);
  std::vector<char> data(bytes);
  if (!f.read(data.data(), static_cast<std::streamsize>(bytes))) {
    std::fprintf(stderr, "cannot read %zu bytes of %s\n", bytes, name.c_str());
    std::exit(2);
  }
  return data;
}

void writeFile(std::string const& name, void const* data, size_t bytes) {
  std::ofstream f(dir + "/" + name, std::ios::binary);
  f.write(static_cast<char const*>(data), static_cast<std::streamsize>(bytes));
}

#define CUDA(call)                                                                        \
  do {                                                                                    \
    cudaError_t e = (call);                                                               \
    if (e != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e)); \
      std::exit(2);                                                                       \
    }                                                                                     \
  } while (0)

/* A device tensor with its TensorRT description. */
struct Tensor {
  PluginTensorDesc desc{};
  size_t bytes = 0;
  void* ptr = nullptr;
  Tensor(std::vector<int64_t> const& d, DataType t, size_t elementBytes) {
    desc.dims.nbDims = static_cast<int32_t>(d.size());
    bytes = elementBytes;
    for (size_t i = 0; i < d.size(); ++i) desc.dims.d[i] = d[i], bytes *= static_cast<size_t>(d[i]);
    desc.type = t;
    desc.format = TensorFormat::kLINEAR;
    CUDA(cudaMalloc(&ptr, bytes));
  }
  void load(std::string const& name) {
    std::vector<char> h = readFile(name, bytes);
    CUDA(cudaMemcpy(ptr, h.data(), bytes, cudaMemcpyHostToDevice));
  }
  void save(std::string const& name) const {
    std::vector<char> h(bytes);
    CUDA(cudaMemcpy(h.data(), ptr, bytes, cudaMemcpyDeviceToHost));
    writeFile(name, h.data(), bytes);
  }
};

/* A plugin as an engine gets it at run time: created from its serialised fields, attached. */
IPluginV3OneRuntime* loadPlugin(IPluginCreatorInterface* const* creators, int32_t n, char const* name,
                                std::vector<std::pair<char const*, int32_t>> const& values) {
  IPluginCreatorV3One* creator = nullptr;
  for (int32_t i = 0; i < n; ++i)
    if (std::strcmp(static_cast<IPluginCreatorV3One*>(creators[i])->getPluginName(), name) == 0)
      creator = static_cast<IPluginCreatorV3One*>(creators[i]);
  if (!creator) return nullptr;
  std::vector<int32_t> v;
  for (auto const& kv : values) v.push_back(kv.second);
  std::vector<PluginField> fields;
  for (size_t i = 0; i < values.size(); ++i) fields.emplace_back(values[i].first, &v[i], PluginFieldType::kINT32, 1);
  PluginFieldCollection fc{static_cast<int32_t>(fields.size()), fields.data()};
  IPluginV3* built = creator->createPlugin(name, &fc, TensorRTPhase::kBUILD);
  if (!built) return nullptr;
  auto rt = static_cast<IPluginV3OneRuntime*>(built->getCapabilityInterface(PluginCapabilityType::kRUNTIME));
  IPluginV3* loaded = creator->createPlugin(name, rt->getFieldsToSerialize(), TensorRTPhase::kRUNTIME);
  IPluginV3* attached = static_cast<IPluginV3OneRuntime*>(loaded->getCapabilityInterface(PluginCapabilityType::kRUNTIME))
                            ->attachToContext(nullptr);
  delete built;
  delete loaded;
  return static_cast<IPluginV3OneRuntime*>(attached->getCapabilityInterface(PluginCapabilityType::kRUNTIME));
}

/* One enqueue of `plugin` on inputs `in` (by index) and outputs `out`; 0 on success. */
int enqueue(IPluginV3OneRuntime* plugin, std::vector<Tensor*> const& in, std::vector<Tensor*> const& out,
            cudaStream_t stream) {
  std::vector<PluginTensorDesc> inDesc, outDesc;
  std::vector<void const*> inPtr;
  std::vector<void*> outPtr;
  for (Tensor* t : in) inDesc.push_back(t->desc), inPtr.push_back(t->ptr);
  for (Tensor* t : out) outDesc.push_back(t->desc), outPtr.push_back(t->ptr);
  int32_t const nIn = static_cast<int32_t>(in.size()), nOut = static_cast<int32_t>(out.size());
  if (plugin->onShapeChange(inDesc.data(), nIn, outDesc.data(), nOut) != 0) return 1;
  return plugin->enqueue(inDesc.data(), outDesc.data(), inPtr.data(), outPtr.data(), nullptr, stream);
}

DataType const F32 = DataType::kFLOAT, BF16 = DataType::kBF16, I32 = DataType::kINT32, I8 = DataType::kINT8;

/* A step's plugins on network rings and cursors. */
struct NetworkStep {
  IPluginV3OneRuntime *step, *advance, *reset;
  std::vector<Tensor*> stepIn, stepOut, advanceIn;  // advanceIn[0]: the cursors
};

/* Step t (its inputs loaded): ReplaySSMReset on the slots of new_<t>.bin where it exists (their
 * rings emptied), the step, ReplaySSMAdvance; then the output (stepOut[0]) saved as y_<t>.bin. */
int runNetworkStep(NetworkStep const& p, Tensor& fresh, int64_t t, cudaStream_t stream) {
  std::string const at = "_" + std::to_string(t) + ".bin";
  Tensor* writePos = p.advanceIn[0];
  if (std::ifstream(dir + "/new" + at).good()) {
    fresh.load("new" + at);
    if (enqueue(p.reset, {writePos, &fresh}, {writePos}, stream) != 0) {
      std::fprintf(stderr, "reset failed at step %lld\n", static_cast<long long>(t));
      return 1;
    }
  }
  if (enqueue(p.step, p.stepIn, p.stepOut, stream) != 0 || enqueue(p.advance, p.advanceIn, {writePos}, stream) != 0) {
    std::fprintf(stderr, "enqueue failed at step %lld\n", static_cast<long long>(t));
    return 1;
  }
  CUDA(cudaStreamSynchronize(stream));
  p.stepOut[0]->save("y" + at);
  return 0;
}

int runMamba2(IPluginCreatorInterface* const* creators, int32_t n, cudaStream_t stream) {
  int64_t S, B, H, P, N, G, L, T, M;
  std::ifstream f(dir + "/sizes.txt");
  if (!(f >> S >> B >> H >> P >> N >> G >> L >> T >> M)) return 2;
  IPluginV3OneRuntime* plugin =
      loadPlugin(creators, n, "ReplaySSMMamba2Step",
                 {{"route", 0}, {"owns_rings", 1}, {"max_slots", static_cast<int32_t>(M)},
                  {"buffer_len", static_cast<int32_t>(L)}, {"has_z", 1}, {"has_reset", 1}});
  if (!plugin) return 2;
  Tensor state({S, H, P, N}, F32, 4), x({B, H, P}, BF16, 2), dt({B, H}, BF16, 2), A({H}, F32, 4),
      Bm({B, G, N}, BF16, 2), C({B, G, N}, BF16, 2), D({H}, F32, 4), dtBias({H}, F32, 4), slot({B}, I32, 4),
      z({B, H, P}, BF16, 2), fresh({B}, I32, 4), y({B, H, P}, BF16, 2);
  state.load("state.bin"), A.load("A.bin"), D.load("D.bin"), dtBias.load("dt_bias.bin"), y.load("y_init.bin");
  for (int64_t t = 0; t < T; ++t) {
    std::string const at = "_" + std::to_string(t) + ".bin";
    x.load("x" + at), dt.load("dt" + at), Bm.load("B" + at), C.load("C" + at), z.load("z" + at);
    slot.load("slot" + at), fresh.load("new" + at);
    // inputs: state x dt A B C D dt_bias slot_idx z new_slots; outputs: y, the state in place
    if (enqueue(plugin, {&state, &x, &dt, &A, &Bm, &C, &D, &dtBias, &slot, &z, &fresh}, {&y, &state}, stream) != 0) {
      std::fprintf(stderr, "enqueue failed at step %lld\n", static_cast<long long>(t));
      return 1;
    }
    CUDA(cudaStreamSynchronize(stream));
    y.save("y" + at);
  }
  state.save("state_out.bin");
  return 0;
}

int runMamba2Network(IPluginCreatorInterface* const* creators, int32_t n, cudaStream_t stream) {
  int64_t S, B, H, P, N, G, L, T, route, stateBf16, flushAll;
  std::ifstream f(dir + "/sizes.txt");
  if (!(f >> S >> B >> H >> P >> N >> G >> L >> T >> route >> stateBf16 >> flushAll)) return 2;
  IPluginV3OneRuntime* step = loadPlugin(creators, n, "ReplaySSMMamba2Step",
                                         {{"route", static_cast<int32_t>(route)}, {"has_z", 1}, {"has_force_flush", 1}});
  IPluginV3OneRuntime* advance = loadPlugin(
      creators, n, "ReplaySSMAdvance",
      {{"buffer_len", static_cast<int32_t>(L)}, {"has_force_flush", 1}, {"flush_all", static_cast<int32_t>(flushAll)}});
  IPluginV3OneRuntime* reset = loadPlugin(creators, n, "ReplaySSMReset", {{"pad_slot_id", -1}});
  if (!step || !advance || !reset) return 2;
  Tensor state({S, H, P, N}, stateBf16 ? BF16 : F32, stateBf16 ? 2 : 4), x({B, H, P}, BF16, 2), dt({B, H}, BF16, 2),
      A({H}, F32, 4), Bm({B, G, N}, BF16, 2), C({B, G, N}, BF16, 2), D({H}, F32, 4), dtBias({H}, F32, 4),
      slot({B}, I32, 4), xCache({S, H, L, P}, BF16, 2), dtCache({S, H, L}, F32, 4), BCache({S, G, L, N}, BF16, 2),
      writePos({S}, I32, 4), z({B, H, P}, BF16, 2), flush({B}, I8, 1), fresh({B}, I32, 4), y({B, H, P}, BF16, 2);
  state.load("state.bin"), xCache.load("x_cache.bin"), dtCache.load("dt_cache.bin"), BCache.load("B_cache.bin");
  writePos.load("write_pos.bin"), A.load("A.bin"), D.load("D.bin"), dtBias.load("dt_bias.bin"), y.load("y_init.bin");
  // step: state x dt A B C D dt_bias slot_idx x_cache dt_cache B_cache write_pos z force_flush
  //   -> y, the state and the three rings in place; advance: write_pos slot_idx force_flush -> write_pos
  NetworkStep const plugins{
      step, advance, reset,
      {&state, &x, &dt, &A, &Bm, &C, &D, &dtBias, &slot, &xCache, &dtCache, &BCache, &writePos, &z, &flush},
      {&y, &state, &xCache, &dtCache, &BCache}, {&writePos, &slot, &flush}};
  for (int64_t t = 0; t < T; ++t) {
    std::string const at = "_" + std::to_string(t) + ".bin";
    x.load("x" + at), dt.load("dt" + at), Bm.load("B" + at), C.load("C" + at), z.load("z" + at);
    slot.load("slot" + at), flush.load("flush" + at);
    if (runNetworkStep(plugins, fresh, t, stream) != 0) return 1;
  }
  state.save("state_out.bin"), xCache.save("x_cache_out.bin"), dtCache.save("dt_cache_out.bin");
  BCache.save("B_cache_out.bin"), writePos.save("write_pos_out.bin");
  return 0;
}

int runGDN(IPluginCreatorInterface* const* creators, int32_t n, cudaStream_t stream) {
  int64_t S, B, H, HV, K, V, L, T, stateBf16;
  std::ifstream f(dir + "/sizes.txt");
  if (!(f >> S >> B >> H >> HV >> K >> V >> L >> T >> stateBf16)) return 2;
  int32_t const flags = std::ifstream(dir + "/flush_0.bin").good();
  IPluginV3OneRuntime* step = loadPlugin(creators, n, "ReplaySSMGDNStep", {{"route", 0}, {"has_force_flush", flags}});
  IPluginV3OneRuntime* advance = loadPlugin(creators, n, "ReplaySSMAdvance",
                                            {{"buffer_len", static_cast<int32_t>(L)}, {"has_force_flush", flags}});
  IPluginV3OneRuntime* reset = loadPlugin(creators, n, "ReplaySSMReset", {{"pad_slot_id", -1}});
  if (!step || !advance || !reset) return 2;
  DataType const wide = stateBf16 ? BF16 : F32;  // the state and the d / k rings (cache.gdn_ring_dtype)
  size_t const wideBytes = stateBf16 ? 2 : 4;
  Tensor state({S, HV, V, K}, wide, wideBytes), q({B, H, K}, BF16, 2), k({B, H, K}, BF16, 2), v({B, HV, V}, BF16, 2),
      a({B, HV}, BF16, 2), b({B, HV}, BF16, 2), A_log({HV}, F32, 4), dtBias({HV}, F32, 4), slot({B}, I32, 4),
      dCache({S, HV, L, V}, wide, wideBytes), kCache({S, H, L, K}, wide, wideBytes), gCache({S, HV, L}, F32, 4),
      writePos({S}, I32, 4), y({B, HV, V}, BF16, 2), fresh({B}, I32, 4), flush({B}, I8, 1);
  // step: state q k v a b A_log dt_bias slot_idx d_cache k_cache g_cache write_pos [force_flush]
  //   -> y, state and rings in place; advance: write_pos slot_idx [force_flush] -> write_pos
  NetworkStep plugins{step, advance, reset,
                      {&state, &q, &k, &v, &a, &b, &A_log, &dtBias, &slot, &dCache, &kCache, &gCache, &writePos},
                      {&y, &state, &dCache, &kCache, &gCache}, {&writePos, &slot}};
  if (flags) plugins.stepIn.push_back(&flush), plugins.advanceIn.push_back(&flush);
  state.load("state.bin"), dCache.load("d_cache.bin"), kCache.load("k_cache.bin"), gCache.load("g_cache.bin");
  writePos.load("write_pos.bin"), A_log.load("A_log.bin"), dtBias.load("dt_bias.bin"), y.load("y_init.bin");
  for (int64_t t = 0; t < T; ++t) {
    std::string const at = "_" + std::to_string(t) + ".bin";
    q.load("q" + at), k.load("k" + at), v.load("v" + at), a.load("a" + at), b.load("b" + at), slot.load("slot" + at);
    if (flags) flush.load("flush" + at);
    if (runNetworkStep(plugins, fresh, t, stream) != 0) return 1;
  }
  state.save("state_out.bin"), dCache.save("d_cache_out.bin"), kCache.save("k_cache_out.bin");
  gCache.save("g_cache_out.bin"), writePos.save("write_pos_out.bin");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) return 2;
  dir = argv[3];
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    std::fprintf(stderr, "dlopen: %s\n", dlerror());
    return 2;
  }
  using GetCreators = IPluginCreatorInterface* const* (*)(int32_t&);
  int32_t n = 0;
  IPluginCreatorInterface* const* creators = reinterpret_cast<GetCreators>(dlsym(lib, "getCreators"))(n);
  cudaStream_t stream;
  CUDA(cudaStreamCreate(&stream));
  std::string const mode = argv[2];
  int const status = mode == "mamba2"       ? runMamba2(creators, n, stream)
                     : mode == "mamba2_net" ? runMamba2Network(creators, n, stream)
                     : mode == "gdn"        ? runGDN(creators, n, stream)
                                            : 2;
  if (status == 0) std::printf("ran %s\n", mode.c_str());
  return status;
}
