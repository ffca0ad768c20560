// bankml's own SPIR-V assembler: compute shaders written as words, so no shader compiler is needed
// at build or run time. A Module keeps SPIR-V's logical sections apart and joins them in the order
// the specification requires (words()); types and constants are made once and reused. It covers
// what compute kernels use and no more: scalar and vector types, storage buffers, push constants,
// the invocation and subgroup ids, workgroup memory and a control barrier, integer and float
// arithmetic, subgroup sums, GLSL.std.450 extended instructions, structured selections and loops,
// and specialisation constants (values the pipeline sets when it is made, so that one module holds
// variants the driver folds).
//
// Every float multiply, add and subtract and every extended instruction op() emits is decorated
// NoContraction, so no driver may fuse what the CPU kernels keep separate.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace bankml::gpu::spirv {

// SPIR-V 1.3: what Vulkan 1.1 accepts, with the StorageBuffer storage class in the core.
inline constexpr uint32_t MAGIC = 0x07230203, VERSION_1_3 = 0x00010300;

// The opcodes, enumerants and GLSL.std.450 instructions bankml uses (SPIR-V 1.3 / GLSL.std.450 1.0).
enum Op : uint16_t {
    OpName = 5, OpMemberName = 6, OpExtInstImport = 11, OpExtInst = 12, OpMemoryModel = 14,
    OpExtension = 10, OpEntryPoint = 15, OpExecutionMode = 16, OpCapability = 17, OpTypeVoid = 19, OpTypeBool = 20,
    OpTypeInt = 21, OpTypeFloat = 22, OpTypeVector = 23, OpTypeArray = 28, OpTypeRuntimeArray = 29,
    OpTypeStruct = 30, OpTypePointer = 32, OpTypeFunction = 33, OpConstantTrue = 41,
    OpConstantFalse = 42, OpConstant = 43, OpConstantComposite = 44,
    OpSpecConstantTrue = 48, OpSpecConstantFalse = 49, OpSpecConstant = 50, OpFunction = 54,
    OpFunctionEnd = 56, OpVariable = 59, OpLoad = 61, OpStore = 62, OpAccessChain = 65,
    OpDecorate = 71, OpMemberDecorate = 72, OpCompositeConstruct = 80, OpCompositeExtract = 81, OpConvertFToU = 109,
    OpConvertFToS = 110, OpConvertSToF = 111, OpConvertUToF = 112, OpFConvert = 115, OpBitcast = 124,
    OpSNegate = 126, OpFNegate = 127, OpIAdd = 128, OpFAdd = 129, OpISub = 130, OpFSub = 131,
    OpIMul = 132, OpFMul = 133, OpUDiv = 134, OpSDiv = 135, OpFDiv = 136, OpUMod = 137,
    OpIsNan = 156, OpLogicalOr = 166, OpLogicalAnd = 167, OpLogicalNot = 168, OpSelect = 169, OpIEqual = 170,
    OpINotEqual = 171, OpUGreaterThan = 172, OpSGreaterThan = 173, OpUGreaterThanEqual = 174,
    OpSGreaterThanEqual = 175, OpULessThan = 176, OpSLessThan = 177, OpULessThanEqual = 178,
    OpSLessThanEqual = 179, OpFOrdEqual = 180, OpFOrdNotEqual = 182, OpFUnordNotEqual = 183, OpFOrdLessThan = 184,
    OpFOrdGreaterThan = 186, OpFOrdLessThanEqual = 188, OpFOrdGreaterThanEqual = 190,
    OpShiftRightLogical = 194, OpShiftRightArithmetic = 195, OpShiftLeftLogical = 196,
    OpBitwiseOr = 197, OpBitwiseXor = 198, OpBitwiseAnd = 199, OpNot = 200, OpBitFieldUExtract = 203,
    OpSDotKHR = 4450, OpGroupNonUniformFAdd = 350,
    OpControlBarrier = 224, OpLoopMerge = 246, OpSelectionMerge = 247, OpLabel = 248,
    OpBranch = 249, OpBranchConditional = 250, OpReturn = 253,
};
enum : uint32_t {
    CapabilityShader = 1, CapabilityFloat64 = 10, CapabilityDenormPreserve = 4464,
    CapabilitySignedZeroInfNanPreserve = 4466, ExecutionModeDenormPreserve = 4459,
    CapabilityDotProductInput4x8BitPackedKHR = 6018, CapabilityDotProductKHR = 6019, PackedVectorFormat4x8Bit = 0,
    ExecutionModeSignedZeroInfNanPreserve = 4461, AddressingLogical = 0, MemoryModelGLSL450 = 1, ExecutionModelGLCompute = 5,
    ExecutionModeLocalSize = 17,
    StorageUniformConstant = 0, StorageInput = 1, StorageWorkgroup = 4, StoragePushConstant = 9,
    StorageFunction = 7, StorageStorageBuffer = 12,
    DecorationSpecId = 1, DecorationBlock = 2, DecorationArrayStride = 6, DecorationBuiltIn = 11,
    DecorationNoContraction = 42, DecorationNonWritable = 24, DecorationBinding = 33,
    DecorationDescriptorSet = 34, DecorationOffset = 35,
    BuiltInWorkgroupId = 26, BuiltInLocalInvocationId = 27, BuiltInGlobalInvocationId = 28,
    BuiltInSubgroupSize = 36, BuiltInNumSubgroups = 38, BuiltInSubgroupId = 40, BuiltInSubgroupLocalInvocationId = 41,
    CapabilityGroupNonUniform = 61, CapabilityGroupNonUniformArithmetic = 63, ScopeSubgroup = 3, GroupOperationReduce = 0,
    ScopeWorkgroup = 2, SemanticsAcquireRelease = 0x8, SemanticsWorkgroupMemory = 0x100,
    SelectionControlNone = 0, LoopControlNone = 0, FunctionControlNone = 0,
    GlslRoundEven = 2, GlslSqrt = 31, GlslFma = 50, GlslUnpackHalf2x16 = 62, GlslFAbs = 4, GlslFMin = 37, GlslFMax = 40, GlslUMin = 38, GlslUMax = 41,
};

// The first words of a string operand: UTF-8 bytes, NUL-terminated, padded to a word with NULs.
std::vector<uint32_t> string_words(const std::string& s);

class Module {
public:
    // A GLCompute module: capability Shader, GLSL.std.450 imported, Logical/GLSL450 memory model.
    Module();

    uint32_t id() { return bound_++; }

    // Types and constants, made once each (asking twice returns the same id).
    uint32_t t_void();
    uint32_t t_bool();
    uint32_t t_int(uint32_t width, bool is_signed);
    uint32_t t_u32() { return t_int(32, false); }
    uint32_t t_i32() { return t_int(32, true); }
    uint32_t t_f32();
    uint32_t t_f64();
    uint32_t t_vec(uint32_t elem, uint32_t n);
    uint32_t t_array(uint32_t elem, uint32_t len);          // len is a literal; makes its u32 constant
    uint32_t t_runtime_array(uint32_t elem, uint32_t stride);
    uint32_t t_struct(const std::vector<uint32_t>& members);  // a fresh struct every call
    uint32_t t_ptr(uint32_t storage, uint32_t type);
    uint32_t t_fn(uint32_t ret, const std::vector<uint32_t>& params = {});
    uint32_t c_u32(uint32_t v);
    uint32_t c_i32(int32_t v);
    uint32_t c_f32(float v);
    uint32_t c_f64(double v);
    // Declares a capability the module uses (once).
    void capability(uint32_t cap);
    // Declares a SPIR-V extension (once).
    void extension(const std::string& name);
    // An execution mode of main beside its local size (e.g. DenormPreserve 32).
    void execution_mode(uint32_t mode, const std::vector<uint32_t>& args);
    uint32_t c_bool(bool v);
    // Specialisation constants: a bool or u32 decorated SpecId spec_id, holding `default_value`
    // unless the pipeline's VkSpecializationInfo gives spec_id another. Asking again for one id
    // returns the same constant; asking with another type or default is an error.
    uint32_t spec_bool(uint32_t spec_id, bool default_value);
    uint32_t spec_u32(uint32_t spec_id, uint32_t default_value);

    // Annotations and debug names.
    void decorate(uint32_t target, uint32_t decoration, const std::vector<uint32_t>& args = {});
    void member_decorate(uint32_t st, uint32_t member, uint32_t decoration, const std::vector<uint32_t>& args = {});
    void name(uint32_t target, const std::string& n);

    // Global resources. A storage buffer is a Block struct holding one runtime array of elem
    // (array stride `stride` bytes: 4 for scalars, 16 for 4-vectors) at descriptor set 0, the
    // given binding; returns the variable.
    uint32_t storage_buffer(uint32_t elem, uint32_t binding, bool read_only, const std::string& n, uint32_t stride = 4);
    // A push-constant block of u32 members at offsets 0, 4, 8, ...; returns the variable.
    uint32_t push_constants(uint32_t count);
    uint32_t builtin_u32x3(uint32_t builtin);   // an Input uvec3 variable (also listed in the entry)
    uint32_t builtin_u32(uint32_t builtin);     // an Input u32 variable (SubgroupId, NumSubgroups, ...)
    uint32_t workgroup_array(uint32_t elem, uint32_t len);

    // The one entry point "main" with a local size of (x, 1, 1). Call before begin_main().
    void entry_point(uint32_t local_x);
    // Opens main's body (function, first label); end_main() closes it.
    void begin_main();
    void end_main();
    // A Function-storage variable, placed at the start of main's first block as SPIR-V requires.
    uint32_t local_var(uint32_t type);

    // One instruction with a result type and a fresh result id (returned). Float multiply, add and
    // subtract are decorated NoContraction.
    uint32_t op(uint16_t opcode, uint32_t result_ty, const std::vector<uint32_t>& operands);
    // One instruction without a result.
    void emit(uint16_t opcode, const std::vector<uint32_t>& operands);
    // A GLSL.std.450 instruction, decorated NoContraction.
    uint32_t ext(uint32_t result_ty, uint32_t inst, const std::vector<uint32_t>& operands);

    // Convenience forms of the common instructions.
    uint32_t load(uint32_t ty, uint32_t ptr) { return op(OpLoad, ty, {ptr}); }
    void store(uint32_t ptr, uint32_t value) { emit(OpStore, {ptr, value}); }
    // Element idx of a storage buffer's runtime array, loaded.
    uint32_t load_elem(uint32_t elem_ty, uint32_t buffer, uint32_t idx);
    void store_elem(uint32_t elem_ty, uint32_t buffer, uint32_t idx, uint32_t value);
    uint32_t builtin_x(uint32_t var);  // the x component of an invocation id
    void barrier();  // OpControlBarrier: workgroup execution and workgroup memory

    // Structured control flow. if_then: a selection with its merge block. loop: for (;;) with the
    // condition evaluated in its own block, the body, then the continue block.
    void if_then(uint32_t cond, const std::function<void()>& then_body);
    void loop(const std::function<uint32_t()>& cond, const std::function<void()>& body,
              const std::function<void()>& cont);

    // The module: header then the sections in the specification's order (§2.4).
    std::vector<uint32_t> words() const;

private:
    static void put(std::vector<uint32_t>& sec, uint16_t opcode, const std::vector<uint32_t>& operands);
    uint32_t type_once(const std::vector<uint32_t>& key, uint16_t opcode, const std::vector<uint32_t>& operands);
    uint32_t spec(uint32_t spec_id, const std::vector<uint32_t>& key);  // key: opcode, type, default words

    uint32_t bound_ = 1;
    uint32_t glsl_ = 0, main_ = 0, local_x_ = 0;
    std::vector<uint32_t> capabilities_, extensions_, imports_, memory_model_, entry_points_,
        execution_modes_, debug_, annotations_, types_, fn_head_, fn_vars_, fn_body_;
    std::vector<uint32_t> interface_;  // Input variables listed in the entry point
    std::vector<std::vector<uint32_t>> modes_;  // main's execution modes beyond its local size
    std::vector<std::string> extension_names_;
    std::map<std::vector<uint32_t>, uint32_t> made_;  // types and constants by their defining words
    std::map<uint32_t, std::pair<std::vector<uint32_t>, uint32_t>> specs_;  // SpecId: (defining words, id)
    bool in_main_ = false;
};

}  // namespace bankml::gpu::spirv
