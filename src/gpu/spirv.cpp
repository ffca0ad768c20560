#include "gpu/spirv.h"

#include <cstring>

#include "core/error.h"

namespace bankml::gpu::spirv {

std::vector<uint32_t> string_words(const std::string& s) {
    std::vector<uint32_t> w(s.size() / 4 + 1, 0u);  // always room for the terminating NUL
    for (size_t i = 0; i < s.size(); ++i) w[i / 4] |= uint32_t(uint8_t(s[i])) << (8 * (i % 4));
    return w;
}

void Module::put(std::vector<uint32_t>& sec, uint16_t opcode, const std::vector<uint32_t>& operands) {
    sec.push_back(uint32_t(operands.size() + 1) << 16 | opcode);
    sec.insert(sec.end(), operands.begin(), operands.end());
}

Module::Module() {
    put(capabilities_, OpCapability, {CapabilityShader});
    glsl_ = id();
    std::vector<uint32_t> ops{glsl_};
    auto s = string_words("GLSL.std.450");
    ops.insert(ops.end(), s.begin(), s.end());
    put(imports_, OpExtInstImport, ops);
    put(memory_model_, OpMemoryModel, {AddressingLogical, MemoryModelGLSL450});
}

uint32_t Module::type_once(const std::vector<uint32_t>& key, uint16_t opcode, const std::vector<uint32_t>& operands) {
    auto it = made_.find(key);
    if (it != made_.end()) return it->second;
    uint32_t r = id();
    std::vector<uint32_t> ops;
    // Constants carry a result type before the result id; types only the result id.
    if (opcode == OpConstant || opcode == OpConstantTrue || opcode == OpConstantFalse) {
        ops.push_back(operands[0]);
        ops.push_back(r);
        ops.insert(ops.end(), operands.begin() + 1, operands.end());
    } else {
        ops.push_back(r);
        ops.insert(ops.end(), operands.begin(), operands.end());
    }
    put(types_, opcode, ops);
    made_[key] = r;
    return r;
}

uint32_t Module::t_void() { return type_once({OpTypeVoid}, OpTypeVoid, {}); }
uint32_t Module::t_bool() { return type_once({OpTypeBool}, OpTypeBool, {}); }
uint32_t Module::t_int(uint32_t width, bool s) { return type_once({OpTypeInt, width, s}, OpTypeInt, {width, s ? 1u : 0u}); }
uint32_t Module::t_f32() { return type_once({OpTypeFloat, 32}, OpTypeFloat, {32}); }
uint32_t Module::t_f64() { return type_once({OpTypeFloat, 64}, OpTypeFloat, {64}); }
uint32_t Module::t_vec(uint32_t e, uint32_t n) { return type_once({OpTypeVector, e, n}, OpTypeVector, {e, n}); }
uint32_t Module::t_array(uint32_t e, uint32_t len) {
    uint32_t l = c_u32(len);
    return type_once({OpTypeArray, e, l}, OpTypeArray, {e, l});
}
uint32_t Module::t_runtime_array(uint32_t e, uint32_t stride) {
    // A decorated type differs from an undecorated one, so the stride is part of the key.
    auto key = std::vector<uint32_t>{OpTypeRuntimeArray, e, stride};
    bool fresh = !made_.count(key);
    uint32_t r = type_once(key, OpTypeRuntimeArray, {e});
    if (fresh) decorate(r, DecorationArrayStride, {stride});
    return r;
}
uint32_t Module::t_struct(const std::vector<uint32_t>& members) {
    uint32_t r = id();
    std::vector<uint32_t> ops{r};
    ops.insert(ops.end(), members.begin(), members.end());
    put(types_, OpTypeStruct, ops);
    return r;
}
uint32_t Module::t_ptr(uint32_t sc, uint32_t t) { return type_once({OpTypePointer, sc, t}, OpTypePointer, {sc, t}); }
uint32_t Module::t_fn(uint32_t ret, const std::vector<uint32_t>& params) {
    std::vector<uint32_t> key{OpTypeFunction, ret}, ops{ret};
    key.insert(key.end(), params.begin(), params.end());
    ops.insert(ops.end(), params.begin(), params.end());
    return type_once(key, OpTypeFunction, ops);
}
uint32_t Module::c_u32(uint32_t v) { uint32_t t = t_u32(); return type_once({OpConstant, t, v}, OpConstant, {t, v}); }
uint32_t Module::c_i32(int32_t v) { uint32_t t = t_i32(); return type_once({OpConstant, t, uint32_t(v)}, OpConstant, {t, uint32_t(v)}); }
uint32_t Module::c_f32(float v) {
    uint32_t t = t_f32(), u;
    std::memcpy(&u, &v, 4);
    return type_once({OpConstant, t, u}, OpConstant, {t, u});
}
uint32_t Module::c_f64(double v) {
    uint32_t t = t_f64();
    uint64_t u;
    std::memcpy(&u, &v, 8);
    // A 64-bit literal: the low word first.
    return type_once({OpConstant, t, uint32_t(u), uint32_t(u >> 32)}, OpConstant, {t, uint32_t(u), uint32_t(u >> 32)});
}
void Module::capability(uint32_t cap) {
    for (size_t i = 0; i + 1 < capabilities_.size(); i += 2)
        if (capabilities_[i + 1] == cap) return;
    put(capabilities_, OpCapability, {cap});
}
void Module::extension(const std::string& name) {
    for (const std::string& e : extension_names_)
        if (e == name) return;
    extension_names_.push_back(name);
    put(extensions_, OpExtension, string_words(name));
}
void Module::execution_mode(uint32_t mode, const std::vector<uint32_t>& args) {
    std::vector<uint32_t> m{mode};
    m.insert(m.end(), args.begin(), args.end());
    modes_.push_back(m);
}
uint32_t Module::c_bool(bool v) {
    uint32_t t = t_bool();
    uint16_t o = v ? OpConstantTrue : OpConstantFalse;
    return type_once({o, t}, o, {t});
}

namespace {
// A specialisation constant's defining words: opcode, type, default value.
std::string spec_what(const std::vector<uint32_t>& k) {
    if (k[0] == OpSpecConstant) return "u32 " + std::to_string(k[2]);
    return std::string("bool ") + (k[0] == OpSpecConstantTrue ? "true" : "false");
}
}  // namespace

uint32_t Module::spec(uint32_t spec_id, const std::vector<uint32_t>& key) {
    auto it = specs_.find(spec_id);
    if (it != specs_.end()) {
        if (it->second.first != key)
            throw Error("spirv::Module: SpecId " + std::to_string(spec_id) + " is a " + spec_what(it->second.first) +
                        ", asked again as a " + spec_what(key));
        return it->second.second;
    }
    // Never shared with another constant: each has its own SpecId.
    uint32_t r = id();
    std::vector<uint32_t> ops{key[1], r};
    ops.insert(ops.end(), key.begin() + 2, key.end());
    put(types_, uint16_t(key[0]), ops);
    decorate(r, DecorationSpecId, {spec_id});
    specs_[spec_id] = {key, r};
    return r;
}
uint32_t Module::spec_bool(uint32_t spec_id, bool v) {
    return spec(spec_id, {uint32_t(v ? OpSpecConstantTrue : OpSpecConstantFalse), t_bool()});
}
uint32_t Module::spec_u32(uint32_t spec_id, uint32_t v) { return spec(spec_id, {OpSpecConstant, t_u32(), v}); }

void Module::decorate(uint32_t target, uint32_t d, const std::vector<uint32_t>& args) {
    std::vector<uint32_t> ops{target, d};
    ops.insert(ops.end(), args.begin(), args.end());
    put(annotations_, OpDecorate, ops);
}
void Module::member_decorate(uint32_t st, uint32_t m, uint32_t d, const std::vector<uint32_t>& args) {
    std::vector<uint32_t> ops{st, m, d};
    ops.insert(ops.end(), args.begin(), args.end());
    put(annotations_, OpMemberDecorate, ops);
}
void Module::name(uint32_t target, const std::string& n) {
    std::vector<uint32_t> ops{target};
    auto s = string_words(n);
    ops.insert(ops.end(), s.begin(), s.end());
    put(debug_, OpName, ops);
}

uint32_t Module::storage_buffer(uint32_t elem, uint32_t binding, bool read_only, const std::string& n, uint32_t stride) {
    uint32_t arr = t_runtime_array(elem, stride);
    uint32_t st = t_struct({arr});
    decorate(st, DecorationBlock);
    member_decorate(st, 0, DecorationOffset, {0});
    if (read_only) member_decorate(st, 0, DecorationNonWritable);
    uint32_t var = id();
    put(types_, OpVariable, {t_ptr(StorageStorageBuffer, st), var, StorageStorageBuffer});
    decorate(var, DecorationDescriptorSet, {0});
    decorate(var, DecorationBinding, {binding});
    name(var, n);
    return var;
}

uint32_t Module::push_constants(uint32_t count) {
    std::vector<uint32_t> members(count, t_u32());
    uint32_t st = t_struct(members);
    decorate(st, DecorationBlock);
    for (uint32_t i = 0; i < count; ++i) member_decorate(st, i, DecorationOffset, {4 * i});
    uint32_t var = id();
    put(types_, OpVariable, {t_ptr(StoragePushConstant, st), var, StoragePushConstant});
    name(var, "push");
    return var;
}

uint32_t Module::builtin_u32x3(uint32_t builtin) {
    uint32_t var = id();
    put(types_, OpVariable, {t_ptr(StorageInput, t_vec(t_u32(), 3)), var, StorageInput});
    decorate(var, DecorationBuiltIn, {builtin});
    interface_.push_back(var);
    return var;
}

uint32_t Module::builtin_u32(uint32_t builtin) {
    uint32_t var = id();
    put(types_, OpVariable, {t_ptr(StorageInput, t_u32()), var, StorageInput});
    decorate(var, DecorationBuiltIn, {builtin});
    interface_.push_back(var);
    return var;
}

uint32_t Module::workgroup_array(uint32_t elem, uint32_t len) {
    uint32_t var = id();
    put(types_, OpVariable, {t_ptr(StorageWorkgroup, t_array(elem, len)), var, StorageWorkgroup});
    return var;
}

void Module::entry_point(uint32_t local_x) {
    main_ = id();
    local_x_ = local_x;
    name(main_, "main");
}

void Module::begin_main() {
    if (!main_) throw Error("spirv::Module::begin_main: entry_point() first");
    uint32_t v = t_void();
    put(fn_head_, OpFunction, {v, main_, FunctionControlNone, t_fn(v)});
    put(fn_head_, OpLabel, {id()});
    in_main_ = true;
}

void Module::end_main() {
    put(fn_body_, OpReturn, {});
    put(fn_body_, OpFunctionEnd, {});
    in_main_ = false;
}

uint32_t Module::local_var(uint32_t type) {
    uint32_t var = id();
    put(fn_vars_, OpVariable, {t_ptr(StorageFunction, type), var, StorageFunction});
    return var;
}

uint32_t Module::op(uint16_t opcode, uint32_t result_ty, const std::vector<uint32_t>& operands) {
    uint32_t r = id();
    std::vector<uint32_t> ops{result_ty, r};
    ops.insert(ops.end(), operands.begin(), operands.end());
    put(fn_body_, opcode, ops);
    if (opcode == OpFMul || opcode == OpFAdd || opcode == OpFSub || opcode == OpExtInst)
        decorate(r, DecorationNoContraction);
    return r;
}

void Module::emit(uint16_t opcode, const std::vector<uint32_t>& operands) { put(fn_body_, opcode, operands); }

uint32_t Module::ext(uint32_t result_ty, uint32_t inst, const std::vector<uint32_t>& operands) {
    std::vector<uint32_t> ops{glsl_, inst};
    ops.insert(ops.end(), operands.begin(), operands.end());
    return op(OpExtInst, result_ty, ops);
}

uint32_t Module::load_elem(uint32_t elem_ty, uint32_t buffer, uint32_t idx) {
    uint32_t p = op(OpAccessChain, t_ptr(StorageStorageBuffer, elem_ty), {buffer, c_u32(0), idx});
    return load(elem_ty, p);
}
void Module::store_elem(uint32_t elem_ty, uint32_t buffer, uint32_t idx, uint32_t value) {
    uint32_t p = op(OpAccessChain, t_ptr(StorageStorageBuffer, elem_ty), {buffer, c_u32(0), idx});
    store(p, value);
}
uint32_t Module::builtin_x(uint32_t var) {
    uint32_t v = load(t_vec(t_u32(), 3), var);
    return op(OpCompositeExtract, t_u32(), {v, 0});
}
void Module::barrier() {
    emit(OpControlBarrier, {c_u32(ScopeWorkgroup), c_u32(ScopeWorkgroup),
                            c_u32(SemanticsAcquireRelease | SemanticsWorkgroupMemory)});
}

void Module::if_then(uint32_t cond, const std::function<void()>& then_body) {
    uint32_t then_l = id(), merge = id();
    emit(OpSelectionMerge, {merge, SelectionControlNone});
    emit(OpBranchConditional, {cond, then_l, merge});
    emit(OpLabel, {then_l});
    then_body();
    emit(OpBranch, {merge});
    emit(OpLabel, {merge});
}

void Module::loop(const std::function<uint32_t()>& cond, const std::function<void()>& body,
                  const std::function<void()>& cont) {
    uint32_t header = id(), check = id(), body_l = id(), cont_l = id(), merge = id();
    emit(OpBranch, {header});
    emit(OpLabel, {header});
    emit(OpLoopMerge, {merge, cont_l, LoopControlNone});
    emit(OpBranch, {check});
    emit(OpLabel, {check});
    uint32_t c = cond();
    emit(OpBranchConditional, {c, body_l, merge});
    emit(OpLabel, {body_l});
    body();
    emit(OpBranch, {cont_l});
    emit(OpLabel, {cont_l});
    cont();
    emit(OpBranch, {header});
    emit(OpLabel, {merge});
}

std::vector<uint32_t> Module::words() const {
    std::vector<uint32_t> w{MAGIC, VERSION_1_3, 0u, bound_, 0u};
    auto add = [&](const std::vector<uint32_t>& s) { w.insert(w.end(), s.begin(), s.end()); };
    add(capabilities_);
    add(extensions_);
    add(imports_);
    add(memory_model_);
    if (main_) {
        std::vector<uint32_t> ep{ExecutionModelGLCompute, main_};
        auto s = string_words("main");
        ep.insert(ep.end(), s.begin(), s.end());
        ep.insert(ep.end(), interface_.begin(), interface_.end());
        put(w, OpEntryPoint, ep);
        put(w, OpExecutionMode, {main_, ExecutionModeLocalSize, local_x_, 1, 1});
        for (const auto& m : modes_) {
            std::vector<uint32_t> ops{main_};
            ops.insert(ops.end(), m.begin(), m.end());
            put(w, OpExecutionMode, ops);
        }
    }
    add(debug_);
    add(annotations_);
    add(types_);
    add(fn_head_);
    add(fn_vars_);
    add(fn_body_);
    return w;
}

}  // namespace bankml::gpu::spirv
