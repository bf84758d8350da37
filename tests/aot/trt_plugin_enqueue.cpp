/*
 * Runs ReplaySSMMamba2Step's enqueue on the GPU outside TensorRT (its headers only), in the
 * form examples/trtllm_build builds: rings and cursors owned by the plugin (owns_rings,
 * has_reset, has_z, route output_only). tests/aot/test_aot_cuda.py writes the inputs of a
 * few ring cycles and compares what this writes back with the JIT kernels' step.
 *
 *   trt_plugin_enqueue libreplayssm_trt_plugins.so DIR
 *
 * DIR/sizes.txt: "S B H P N G L T" (slots, batch, heads, headdim, dstate, groups, ring length,
 * steps); DIR holds state.bin (fp32 S*H*P*N), A.bin, D.bin, dt_bias.bin (fp32 H), y_init.bin
 * (bf16 B*H*P) and for each step t: x_t.bin, z_t.bin (bf16 B*H*P), dt_t.bin (bf16 B*H),
 * B_t.bin, C_t.bin (bf16 B*G*N), slot_t.bin, new_t.bin (int32 B). Writes y_t.bin after each
 * step and state_out.bin at the end. Exit 0 when every enqueue succeeded.
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

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  dir = argv[2];
  int64_t S, B, H, P, N, G, L, T;
  {
    std::ifstream f(dir + "/sizes.txt");
    if (!(f >> S >> B >> H >> P >> N >> G >> L >> T)) return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    std::fprintf(stderr, "dlopen: %s\n", dlerror());
    return 2;
  }
  using GetCreators = IPluginCreatorInterface* const* (*)(int32_t&);
  int32_t n = 0;
  IPluginCreatorInterface* const* creators = reinterpret_cast<GetCreators>(dlsym(lib, "getCreators"))(n);
  IPluginCreatorV3One* mamba2 = nullptr;
  for (int32_t i = 0; i < n; ++i) {
    auto c = static_cast<IPluginCreatorV3One*>(creators[i]);
    if (std::strcmp(c->getPluginName(), "ReplaySSMMamba2Step") == 0) mamba2 = c;
  }
  if (!mamba2) return 2;

  int32_t values[6] = {0, 1, static_cast<int32_t>(S), static_cast<int32_t>(L), 1, 1};
  char const* names[6] = {"route", "owns_rings", "max_slots", "buffer_len", "has_z", "has_reset"};
  std::vector<PluginField> fields;
  for (int i = 0; i < 6; ++i) fields.emplace_back(names[i], &values[i], PluginFieldType::kINT32, 1);
  PluginFieldCollection fc{static_cast<int32_t>(fields.size()), fields.data()};
  IPluginV3* built = mamba2->createPlugin("ReplaySSMMamba2Step", &fc, TensorRTPhase::kBUILD);
  if (!built) return 2;
  // The runtime's copy, as an engine gets it: from the serialised fields, attached to a context.
  auto core = static_cast<IPluginV3OneRuntime*>(built->getCapabilityInterface(PluginCapabilityType::kRUNTIME));
  IPluginV3* loaded = mamba2->createPlugin("ReplaySSMMamba2Step", core->getFieldsToSerialize(), TensorRTPhase::kRUNTIME);
  auto rt = static_cast<IPluginV3OneRuntime*>(loaded->getCapabilityInterface(PluginCapabilityType::kRUNTIME));
  IPluginV3* plugin = rt->attachToContext(nullptr);
  auto run = static_cast<IPluginV3OneRuntime*>(plugin->getCapabilityInterface(PluginCapabilityType::kRUNTIME));

  DataType const F32 = DataType::kFLOAT, BF16 = DataType::kBF16, I32 = DataType::kINT32;
  // inputs: state x dt A B C D dt_bias slot_idx z new_slots; outputs: y, state (aliased)
  std::vector<Tensor> in = {{{S, H, P, N}, F32, 4}, {{B, H, P}, BF16, 2}, {{B, H}, BF16, 2}, {{H}, F32, 4},
                            {{B, G, N}, BF16, 2},   {{B, G, N}, BF16, 2}, {{H}, F32, 4},    {{H}, F32, 4},
                            {{B}, I32, 4},          {{B, H, P}, BF16, 2}, {{B}, I32, 4}};
  Tensor y({B, H, P}, BF16, 2);
  in[0].load("state.bin");
  in[3].load("A.bin");
  in[6].load("D.bin");
  in[7].load("dt_bias.bin");
  y.load("y_init.bin");
  std::vector<PluginTensorDesc> inDesc, outDesc = {y.desc, in[0].desc};
  std::vector<void const*> inPtr;
  for (Tensor const& t : in) inDesc.push_back(t.desc), inPtr.push_back(t.ptr);
  void* outPtr[2] = {y.ptr, in[0].ptr};  // the state output aliases input 0
  if (run->onShapeChange(inDesc.data(), static_cast<int32_t>(in.size()), outDesc.data(), 2) != 0) return 1;
  cudaStream_t stream;
  CUDA(cudaStreamCreate(&stream));
  char const* step[] = {"x", "dt", nullptr, "B", "C", nullptr, nullptr, "slot", "z", "new"};
  for (int64_t t = 0; t < T; ++t) {
    for (int i = 1; i <= 10; ++i)
      if (step[i - 1]) in[i].load(std::string(step[i - 1]) + "_" + std::to_string(t) + ".bin");
    if (run->enqueue(inDesc.data(), outDesc.data(), inPtr.data(), outPtr, nullptr, stream) != 0) {
      std::fprintf(stderr, "enqueue failed at step %lld\n", static_cast<long long>(t));
      return 1;
    }
    CUDA(cudaStreamSynchronize(stream));
    y.save("y_" + std::to_string(t) + ".bin");
  }
  in[0].save("state_out.bin");
  delete plugin;
  delete loaded;
  delete built;
  std::printf("ran %lld steps\n", static_cast<long long>(T));
  return 0;
}
