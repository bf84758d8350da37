/*
 * Drives libreplayssm_trt_plugins through its IPluginV3 interfaces the way TensorRT's builder
 * and runtime call them, without TensorRT (only its headers: TRT_INCLUDE_DIR) and without a
 * GPU (no enqueue): creators and their field checks, input counts, aliases, output types,
 * format combinations, the shape check at build time and at a shape change, and the fields'
 * round trip through serialisation. tests/aot/test_aot_build.py builds and runs it.
 *
 *   trt_plugin_harness path/to/libreplayssm_trt_plugins.so    (exit 0: every check held)
 */
#include "NvInferRuntime.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

using namespace nvinfer1;

namespace {

int failures = 0;
#define CHECK(cond)                                                        \
  do {                                                                     \
    if (!(cond)) {                                                         \
      std::fprintf(stderr, "FAILED line %d: %s\n", __LINE__, #cond);       \
      ++failures;                                                          \
    }                                                                      \
  } while (0)

using GetCreators = IPluginCreatorInterface* const* (*)(int32_t&);
IPluginCreatorV3One* creators[4];

IPluginCreatorV3One* creator(char const* name) {
  for (IPluginCreatorV3One* c : creators)
    if (std::strcmp(c->getPluginName(), name) == 0) return c;
  return nullptr;
}

struct Fields {
  std::vector<int32_t> values;
  std::vector<PluginField> fields;
  PluginFieldCollection fc{};
  Fields(std::initializer_list<std::pair<char const*, int32_t>> kv) {
    values.reserve(kv.size());
    for (auto const& [name, v] : kv) {
      values.push_back(v);
      fields.emplace_back(name, &values.back(), PluginFieldType::kINT32, 1);
    }
    fc.nbFields = static_cast<int32_t>(fields.size());
    fc.fields = fields.data();
  }
};

IPluginV3* create(char const* name, Fields const& f) {
  return creator(name)->createPlugin(name, &f.fc, TensorRTPhase::kBUILD);
}
IPluginV3OneBuildV2* build(IPluginV3* p) {
  return static_cast<IPluginV3OneBuildV2*>(p->getCapabilityInterface(PluginCapabilityType::kBUILD));
}
IPluginV3OneRuntime* runtime(IPluginV3* p) {
  return static_cast<IPluginV3OneRuntime*>(p->getCapabilityInterface(PluginCapabilityType::kRUNTIME));
}

Dims dims(std::initializer_list<int64_t> d) {
  Dims r{};
  r.nbDims = static_cast<int32_t>(d.size());
  int i = 0;
  for (int64_t v : d) r.d[i++] = v;
  return r;
}

struct Tensor {
  Dims d;
  DataType t;
};

std::vector<PluginTensorDesc> descs(std::vector<Tensor> const& ts) {
  std::vector<PluginTensorDesc> out;
  for (Tensor const& x : ts) {
    PluginTensorDesc p{};
    p.dims = x.d;
    p.type = x.t;
    p.format = TensorFormat::kLINEAR;
    out.push_back(p);
  }
  return out;
}
std::vector<DynamicPluginTensorDesc> dynamic(std::vector<Tensor> const& ts) {
  std::vector<DynamicPluginTensorDesc> out;
  for (PluginTensorDesc const& p : descs(ts)) {
    DynamicPluginTensorDesc d{};
    d.desc = p;
    d.min = d.max = p.dims;
    out.push_back(d);
  }
  return out;
}

int configure(IPluginV3* p, std::vector<Tensor> const& in) {
  auto d = dynamic(in);
  return build(p)->configurePlugin(d.data(), static_cast<int32_t>(d.size()), nullptr, 0);
}
int shapeChange(IPluginV3* p, std::vector<Tensor> const& in) {
  auto d = descs(in);
  return runtime(p)->onShapeChange(d.data(), static_cast<int32_t>(d.size()), nullptr, 0);
}

constexpr DataType F32 = DataType::kFLOAT, BF16 = DataType::kBF16, I32 = DataType::kINT32, I8 = DataType::kINT8;
constexpr int64_t S = 9, Bt = 3, H = 8, P = 5, N = 6, G = 2, L = 4;  // Mamba2 sizes
constexpr int64_t HV = 6, HK = 2, V = 7, K = 10;                   // GDN sizes

std::vector<Tensor> mamba2Inputs(int64_t batch, bool rings, bool z, bool ff, bool reset) {
  std::vector<Tensor> in = {{dims({S, H, P, N}), F32},   {dims({batch, H, P}), BF16}, {dims({batch, H}), BF16},
                            {dims({H}), F32},            {dims({batch, G, N}), BF16}, {dims({batch, G, N}), BF16},
                            {dims({H}), F32},            {dims({H}), F32},            {dims({batch}), I32}};
  if (rings)
    in.insert(in.end(), {{dims({S, H, L, P}), BF16}, {dims({S, H, L}), F32}, {dims({S, G, L, N}), BF16},
                         {dims({S}), I32}});
  if (z) in.push_back({dims({batch, H, P}), BF16});
  if (ff) in.push_back({dims({batch}), I8});
  if (reset) in.push_back({dims({batch}), I32});
  return in;
}

std::vector<Tensor> gdnInputs(int64_t batch) {
  return {{dims({S, HV, V, K}), F32},  {dims({batch, HK, K}), BF16},   {dims({batch, HK, K}), BF16},
          {dims({batch, HV, V}), BF16}, {dims({batch, HV}), BF16},      {dims({batch, HV}), BF16},
          {dims({HV}), F32},            {dims({HV}), F32},              {dims({batch}), I32},
          {dims({S, HV, L, V}), F32},   {dims({S, HK, L, K}), F32},     {dims({S, HV, L}), F32},
          {dims({S}), I32}};
}

bool formatsOk(IPluginV3* p, std::vector<Tensor> in, std::vector<DataType> const& outTypes) {
  std::vector<Tensor> all = in;
  for (DataType t : outTypes) all.push_back({dims({1}), t});
  auto d = dynamic(all);
  for (int32_t pos = 0; pos < static_cast<int32_t>(all.size()); ++pos)
    if (!build(p)->supportsFormatCombination(pos, d.data(), static_cast<int32_t>(in.size()),
                                             static_cast<int32_t>(outTypes.size())))
      return false;
  return true;
}

void mamba2WithRings() {
  IPluginV3* p = create("ReplaySSMMamba2Step", Fields{{"route", 0}, {"has_z", 1}, {"has_force_flush", 1}});
  CHECK(p != nullptr);
  if (!p) return;
  auto core = static_cast<IPluginV3OneCore*>(p->getCapabilityInterface(PluginCapabilityType::kCORE));
  CHECK(std::strcmp(core->getPluginNamespace(), "replayssm") == 0 && std::strcmp(core->getPluginVersion(), "1") == 0);
  CHECK(build(p)->getNbOutputs() == 5);  // y, then the state and three rings in place
  int32_t const aliased[5] = {-1, 0, 9, 10, 11};
  for (int32_t o = 0; o < 5; ++o) CHECK(build(p)->getAliasedInput(o) == aliased[o]);
  auto in = mamba2Inputs(-1, true, true, true, false);
  CHECK(in.size() == 15);
  std::vector<DataType> inTypes, outTypes(5);
  for (Tensor const& t : in) inTypes.push_back(t.t);
  CHECK(build(p)->getOutputDataTypes(outTypes.data(), 5, inTypes.data(), 15) == 0);
  CHECK(outTypes[0] == BF16 && outTypes[1] == F32 && outTypes[2] == BF16 && outTypes[3] == F32 && outTypes[4] == BF16);
  CHECK(formatsOk(p, in, outTypes));
  auto fp16State = in;
  fp16State[0].t = DataType::kHALF;  // states are fp32 or bf16
  CHECK(!formatsOk(p, fp16State, {BF16, DataType::kHALF, BF16, F32, BF16}));
  auto i64Slots = in;
  i64Slots[8].t = DataType::kINT64;
  CHECK(!formatsOk(p, i64Slots, outTypes));

  CHECK(configure(p, in) == 0);  // the batch not known at build time
  auto wrongN = in;
  wrongN[4].d = dims({-1, G, N + 1});
  CHECK(configure(p, wrongN) != 0);
  CHECK(configure(p, std::vector<Tensor>(in.begin(), in.end() - 1)) != 0);  // an input short
  auto run = mamba2Inputs(Bt, true, true, true, false);
  CHECK(shapeChange(p, run) == 0);
  auto shortRing = run;
  shortRing[9].d = dims({S, H, L + 1, P});  // x ring longer than the dt ring
  CHECK(shapeChange(p, shortRing) != 0);
  auto fewerHeads = run;
  fewerHeads[0].d = dims({S, H / 2, P, N});  // a state with half the heads of x
  CHECK(shapeChange(p, fewerHeads) != 0);
  auto otherBatch = run;
  otherBatch[14].d = dims({Bt + 1});  // force_flush of another batch
  CHECK(shapeChange(p, otherBatch) != 0);
  delete p;
}

void mamba2OwnedRings() {
  Fields f{{"owns_rings", 1}, {"max_slots", S}, {"buffer_len", L}, {"has_reset", 1}};
  IPluginV3* p = create("ReplaySSMMamba2Step", f);
  CHECK(p != nullptr);
  if (!p) return;
  CHECK(build(p)->getNbOutputs() == 2);
  CHECK(build(p)->getAliasedInput(1) == 0 && build(p)->getAliasedInput(0) == -1);
  auto in = mamba2Inputs(Bt, false, false, false, true);
  CHECK(in.size() == 10);
  CHECK(shapeChange(p, in) == 0);
  auto morePool = in;
  morePool[0].d = dims({S + 1, H, P, N});  // more slots than the rings were sized for
  CHECK(shapeChange(p, morePool) != 0);
  // serialised and created again (TensorRT's engine load): the same fields
  PluginFieldCollection const* saved = runtime(p)->getFieldsToSerialize();
  IPluginV3* q = creator("ReplaySSMMamba2Step")->createPlugin("ReplaySSMMamba2Step", saved, TensorRTPhase::kRUNTIME);
  CHECK(q != nullptr);
  if (q) {
    CHECK(build(q)->getNbOutputs() == 2);
    CHECK(shapeChange(q, in) == 0 && shapeChange(q, morePool) != 0);  // max_slots came back
    delete q;
  }
  IPluginV3* c = p->clone();
  CHECK(c != nullptr && shapeChange(c, morePool) != 0);
  delete c;
  delete p;
}

void gdnAndAdvance() {
  IPluginV3* g = create("ReplaySSMGDNStep", Fields{{"route", 0}});
  CHECK(g != nullptr);
  if (g) {
    CHECK(build(g)->getNbOutputs() == 5);
    int32_t const aliased[5] = {-1, 0, 9, 10, 11};
    for (int32_t o = 0; o < 5; ++o) CHECK(build(g)->getAliasedInput(o) == aliased[o]);
    auto in = gdnInputs(-1);
    std::vector<DataType> inTypes, outTypes(5);
    for (Tensor const& t : in) inTypes.push_back(t.t);
    CHECK(build(g)->getOutputDataTypes(outTypes.data(), 5, inTypes.data(), 13) == 0);
    CHECK(outTypes[0] == BF16 && outTypes[1] == F32 && outTypes[2] == F32 && outTypes[4] == F32);  // y as v
    CHECK(formatsOk(g, in, outTypes));
    auto bf16Rings = in;  // bf16 d / k rings need a bf16 state
    bf16Rings[9].t = bf16Rings[10].t = BF16;
    CHECK(!formatsOk(g, bf16Rings, {BF16, F32, BF16, BF16, F32}));
    auto bf16State = bf16Rings;  // and a bf16 state takes bf16 rings only (the pairs the build has)
    bf16State[0].t = BF16;
    CHECK(formatsOk(g, bf16State, {BF16, BF16, BF16, BF16, F32}));
    bf16State[9].t = bf16State[10].t = F32;
    CHECK(!formatsOk(g, bf16State, {BF16, BF16, F32, F32, F32}));
    CHECK(configure(g, in) == 0);
    auto run = gdnInputs(Bt);
    CHECK(shapeChange(g, run) == 0);
    auto kRingOnValueHeads = run;
    kRingOnValueHeads[10].d = dims({S, HV, L, K});
    CHECK(shapeChange(g, kRingOnValueHeads) != 0);
    auto transposed = run;
    transposed[0].d = dims({S, HV, K, V});  // a [slots, HV, K, V] pool is not this plugin's layout
    CHECK(shapeChange(g, transposed) != 0);
    delete g;
  }
  IPluginV3* a = create("ReplaySSMAdvance", Fields{{"buffer_len", 16}, {"has_force_flush", 1}});
  CHECK(a != nullptr);
  if (a) {
    CHECK(build(a)->getNbOutputs() == 1 && build(a)->getAliasedInput(0) == 0);
    std::vector<Tensor> in = {{dims({S}), I32}, {dims({Bt}), I32}, {dims({Bt}), I8}};
    CHECK(shapeChange(a, in) == 0);
    in[2].d = dims({Bt + 1});
    CHECK(shapeChange(a, in) != 0);
    delete a;
  }
  IPluginV3* r = create("ReplaySSMReset", Fields{{"pad_slot_id", -1}});
  CHECK(r != nullptr);
  if (r) {
    CHECK(build(r)->getNbOutputs() == 1 && build(r)->getAliasedInput(0) == 0);
    std::vector<Tensor> in = {{dims({S}), I32}, {dims({Bt}), I32}};
    CHECK(formatsOk(r, in, {I32}));
    CHECK(!formatsOk(r, {{dims({S}), I32}, {dims({Bt}), DataType::kINT64}}, {I32}));
    CHECK(configure(r, in) == 0 && shapeChange(r, in) == 0);
    CHECK(shapeChange(r, {{dims({S, 1}), I32}, {dims({Bt}), I32}}) != 0);
    CHECK(configure(r, {in[0]}) != 0);
    delete r;
  }
}

void badFields() {
  CHECK(create("ReplaySSMMamba2Step", Fields{{"buffer_len", 65}}) == nullptr);
  CHECK(create("ReplaySSMMamba2Step", Fields{{"route", 7}}) == nullptr);
  CHECK(create("ReplaySSMMamba2Step", Fields{{"owns_rings", 1}}) == nullptr);  // needs max_slots
  CHECK(create("ReplaySSMMamba2Step", Fields{{"has_reset", 1}}) == nullptr);   // only with owned rings
  CHECK(create("ReplaySSMGDNStep", Fields{{"owns_rings", 1}, {"max_slots", 4}}) == nullptr);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    std::fprintf(stderr, "dlopen: %s\n", dlerror());
    return 2;
  }
  auto get = reinterpret_cast<GetCreators>(dlsym(lib, "getCreators"));
  int32_t n = 0;
  IPluginCreatorInterface* const* all = get ? get(n) : nullptr;
  CHECK(n == 4);
  if (n != 4) return 1;
  for (int i = 0; i < 4; ++i) creators[i] = static_cast<IPluginCreatorV3One*>(all[i]);
  for (char const* name : {"ReplaySSMMamba2Step", "ReplaySSMGDNStep", "ReplaySSMAdvance", "ReplaySSMReset"})
    CHECK(creator(name));
  badFields();
  mamba2WithRings();
  mamba2OwnedRings();
  gdnAndAdvance();
  std::printf("%s\n", failures ? "FAILED" : "all checks held");
  return failures ? 1 : 0;
}
