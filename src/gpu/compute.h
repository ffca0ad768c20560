// Vulkan compute on one card: one compute queue, host-visible coherent buffers mapped for their
// whole life (device-local and host-visible memory when the card has it), pipelines made from
// bankml's own SPIR-V, and dispatches that wait on a fence. One submission is in flight at a time
// (one command buffer, one fence, one descriptor set per pipeline), so wait() follows each
// submit(). Every Vulkan result is checked; a failure is a bankml::Error naming the call and the
// VkResult. The Gpu owns every Vulkan object it makes (RAII): free() releases a buffer early, and
// the destructor waits for the device to go idle and destroys what is left.
//
// A Gpu is movable, not copyable, and is driven by one thread at a time.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gpu/gpu.h"

struct VkPipelineExecutableStatisticKHR;

namespace bankml::gpu {

// A buffer of the card. Only its Gpu can use or free it; the handle itself owns nothing.
struct Buffer {
    uint64_t id = 0;
    size_t bytes = 0;
    void* mapped = nullptr;  // host address of the memory, or nullptr for device-only memory
};

// A compute pipeline: its module, layouts, descriptor set. Owned by its Gpu.
struct Pipeline {
    uint64_t id = 0;
    uint32_t bindings = 0, push_bytes = 0;
};

// One specialisation constant's value for Gpu::pipeline: its SpecId and its 32 bits (a bool's is
// a VkBool32, 0 or 1).
struct SpecValue {
    uint32_t id = 0;
    uint32_t value = 0;
};

// What Vulkan reports about a physical device, in vkEnumeratePhysicalDevices order.
struct PhysicalDevice {
    size_t index = 0;
    std::string name;
    Kind kind = Kind::Other;  // Cpu for a software renderer whatever its driver reports
};

// One dispatch of a recorded sequence: a pipeline, its buffers (one per binding), its push
// constants and its workgroups. `after`: a memory barrier before it (its inputs are the earlier
// dispatches' outputs); false lets it overlap the dispatch before it.
struct Step {
    const Pipeline* pipeline = nullptr;
    std::vector<const Buffer*> bufs;
    std::vector<uint32_t> push;
    uint32_t groups = 1;
    bool after = true;
};

// Many dispatches recorded once into one command buffer (each with its own descriptor set), then
// submitted as often as wanted: what changes between submissions lives in buffers the host writes.
struct Sequence {
    uint64_t id = 0;
    size_t steps = 0;
};

class Gpu {
public:
    // Vulkan's physical devices; empty (with no error) when there is no loader.
    static std::vector<PhysicalDevice> devices();
    // Opens physical device `index` (vkEnumeratePhysicalDevices order) with one compute queue.
    static Gpu open(size_t index);

    Gpu(Gpu&&) noexcept;
    Gpu& operator=(Gpu&&) noexcept;
    Gpu(const Gpu&) = delete;
    Gpu& operator=(const Gpu&) = delete;
    ~Gpu();

    const std::string& name() const;
    // The workgroup limits the kernels must fit (VkPhysicalDeviceLimits).
    struct Limits {
        uint32_t max_invocations = 0;   // maxComputeWorkGroupInvocations
        uint32_t max_size_x = 0;        // maxComputeWorkGroupSize[0]
        uint32_t max_shared_bytes = 0;  // maxComputeSharedMemorySize
    };
    const Limits& limits() const;
    // True when buffers live in device-local host-visible memory (no staging needed).
    bool device_local_buffers() const;

    // A host-visible coherent buffer, mapped for its life (device-local when the card offers it).
    Buffer buffer(size_t bytes);
    // A host-visible buffer the CPU reads fast (host-cached system memory where the card has it):
    // for results read back every dispatch.
    Buffer readback_buffer(size_t bytes);
    // A device-local buffer the host cannot map (for device-side copies); mapped is nullptr.
    Buffer device_buffer(size_t bytes);
    template <class T>
    Buffer upload(std::span<const T> data) {
        Buffer b = buffer(data.size_bytes() ? data.size_bytes() : 4);
        write(b, data);
        return b;
    }
    template <class T>
    void write(const Buffer& b, std::span<const T> data) { write_bytes(b, data.data(), data.size_bytes()); }
    void write_bytes(const Buffer& b, const void* data, size_t bytes);
    std::vector<float> read_f32(const Buffer& b, size_t n) const;
    uint64_t allocated() const;  // bytes bankml's live buffers hold (any thread may ask)
    // The size of the memory heap buffer() allocates from (device-local host-visible where the
    // card has it, else host-visible): what BANKML_GPU_LIMIT is a share of.
    uint64_t heap_bytes() const;
    // What kind of device it is (PhysicalDevice::kind).
    Kind kind() const;
    // The physical device's index (vkEnumeratePhysicalDevices order): several Gpu objects opened
    // on one card share its memory and its time.
    size_t index() const;
    void free(Buffer& b);

    // `spec`: the values of the module's specialisation constants (VkSpecializationInfo; a constant
    // not named keeps its default, an id the module lacks is ignored, an id named twice is an error).
    Pipeline pipeline(std::span<const uint32_t> spirv, uint32_t bindings, uint32_t push_bytes, std::span<const SpecValue> spec = {});
    // True when the card reports its compiler's statistics per pipeline: Gpu::open enabled
    // VK_KHR_pipeline_executable_properties (the device lists it and its pipelineExecutableInfo
    // feature is on), and pipeline() asks for statistics (not internal representations).
    bool has_pipeline_statistics() const;
    // What the driver's compiler made of p: one "<name> <value>" line per statistic of each of its
    // executables, in the driver's order, names exactly as the driver gives them ("Register Count
    // 64" on NVIDIA). Integers print as integers, floats with %g, booleans as true/false. Empty when
    // !has_pipeline_statistics(). Throws for a pipeline not on this card or a failing Vulkan call.
    std::vector<std::string> pipeline_statistics(const Pipeline& p) const;
    // submit then wait.
    void run(const Pipeline& p, std::span<const Buffer* const> bufs, std::span<const uint32_t> push, uint32_t groups);
    // Records and submits one dispatch of `groups` workgroups; returns at once.
    void submit(const Pipeline& p, std::span<const Buffer* const> bufs, std::span<const uint32_t> push, uint32_t groups);
    // Waits for the submission in flight (throws if there is none): polls the fence for up to the
    // spin time (200 µs unless set; none on a CPU device, whose threads the polling would take),
    // then sleeps on it.
    void wait();
    // The spin time: a caller whose submissions take milliseconds and whose thread has nothing else
    // to do (the forward pass's token) polls through them, since a sleeping wait wakes late.
    void set_spin_us(int us);
    // The card's own time for the last waited dispatch (timestamps around it), in microseconds;
    // negative where the queue has no timestamps.
    double last_dispatch_us() const;
    // One vkCmdCopyBuffer of `bytes` from src to dst, submitted and waited for (the bandwidth bench).
    void copy(const Buffer& src, const Buffer& dst, size_t bytes);

    // True when the card runs shaders with 64-bit floats (shaderFloat64, enabled at open).
    bool has_f64() const;
    // True when shaders may use the packed 8-bit dot product (shaderIntegerDotProduct, enabled at
    // open; core in Vulkan 1.3).
    bool has_int_dot() const;
    // True when compute shaders may use subgroups' basic and arithmetic operations
    // (VkPhysicalDeviceSubgroupProperties: the compute stage, BASIC and ARITHMETIC), so that
    // shader::subgroup_add and the subgroup ids may be used; subgroup_size() is the card's
    // reported size (0 where the card reports none).
    bool subgroup_arithmetic() const;
    uint32_t subgroup_size() const;
    // BANKML_GPU_CLOCK=1 and the card offers VK_KHR_shader_clock's subgroup clock: Gpu::open
    // enabled it (measuring: kernels built with clock stamps).
    bool has_shader_clock() const;
    // Which of Vulkan 1.2's float controls shaders may ask of the card: preserve subnormals, and
    // preserve signed zeros, infinities and NaN (no x + 0 folded to x), for 32- and 64-bit floats.
    struct FloatControls {
        bool denorm32 = false, denorm64 = false, signed_zero32 = false, signed_zero64 = false;
    };
    const FloatControls& float_controls() const;
    // What the card reports of them ("denorm preserve f32 yes, f64 no; ...").
    const std::string& float_controls_detail() const;
    // Records steps into a sequence owned by this card; a barrier ends it so the host may read
    // every output once wait() returns.
    // `profile`: a timestamp after every step, read by step_us() after wait().
    Sequence record(std::span<const Step> steps, bool profile = false);
    // The card time of each step of the last waited profiled sequence, in microseconds (from the
    // end of the step before; empty where the queue has no timestamps or it was not profiled).
    std::vector<double> step_us() const;
    // Submits a recorded sequence; returns at once (wait() follows). last_dispatch_us() then gives
    // the whole sequence's card time.
    void submit(const Sequence& s);
    void free(Sequence& s);

    // With BANKML_GPU_VALIDATION=1 the instance enables VK_LAYER_KHRONOS_validation and collects
    // its warnings and errors here (through VK_EXT_debug_utils); otherwise always empty.
    static std::vector<std::string> validation_messages();
    static bool validation_enabled();

    struct Impl;

private:
    explicit Gpu(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> d_;
};

// One line of pipeline_statistics(): "<name> <value>", the name as the driver gives it (up to
// VK_MAX_DESCRIPTION_SIZE bytes, NUL or not), the value by its format; "(format N)" for a format
// newer than these headers.
std::string statistic_line(const VkPipelineExecutableStatisticKHR& s);

}  // namespace bankml::gpu
