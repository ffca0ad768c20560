#include "gpu/compute.h"

#include "gpu/vulkan.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "core/error.h"

namespace bankml::gpu {

namespace {

// How long wait() polls the fence before it blocks (not on a software renderer, whose threads
// the spinning core would slow down).
constexpr int SPIN_US = 200;

using vulkan::check;
using vulkan::result_name;

// The instance-level entry points, loaded once through vkGetInstanceProcAddr.
struct Loader {
    std::string error;  // why there is no instance
    VkInstance instance = VK_NULL_HANDLE;
    bool validation = false;
    PFN_vkGetInstanceProcAddr gipa = nullptr;
    PFN_vkEnumeratePhysicalDevices enumerate = nullptr;
    PFN_vkGetPhysicalDeviceProperties props = nullptr;
    PFN_vkGetPhysicalDeviceMemoryProperties mem_props = nullptr;
    PFN_vkGetPhysicalDeviceFeatures features = nullptr;
    PFN_vkGetPhysicalDeviceProperties2 props2 = nullptr;
    PFN_vkGetPhysicalDeviceQueueFamilyProperties queue_props = nullptr;
    PFN_vkCreateDevice create_device = nullptr;
    PFN_vkGetDeviceProcAddr gdpa = nullptr;
    PFN_vkEnumerateDeviceExtensionProperties device_extensions = nullptr;
    // Null where the loader or the instance is Vulkan 1.0: then no feature struct can be queried.
    PFN_vkGetPhysicalDeviceFeatures2 features2 = nullptr;
    uint32_t api = VK_API_VERSION_1_0;  // the instance's
};

// Compute runs on the process's one long-lived instance (vulkan::instance(): the loader as the
// registry opens it, BANKML_GPU_VALIDATION honoured); a machine without a loader or driver gets a
// Loader with `error` set.
Loader& loader() {
    static Loader L;
    static std::once_flag once;
    std::call_once(once, [] {
        try {
            const vulkan::Instance& inst = vulkan::instance();
            const vulkan::Vk& vk = inst.vk();
            L.instance = inst.handle();
            L.validation = inst.validation();
            L.gipa = vk.GetInstanceProcAddr;
            L.enumerate = vk.EnumeratePhysicalDevices;
            L.props = vk.GetPhysicalDeviceProperties;
            L.mem_props = vk.GetPhysicalDeviceMemoryProperties;
            L.features = reinterpret_cast<PFN_vkGetPhysicalDeviceFeatures>(
                vk.GetInstanceProcAddr(L.instance, "vkGetPhysicalDeviceFeatures"));
            L.queue_props = vk.GetPhysicalDeviceQueueFamilyProperties;
            L.create_device = vk.CreateDevice;
            L.gdpa = vk.GetDeviceProcAddr;
            L.device_extensions = vk.EnumerateDeviceExtensionProperties;
            L.api = inst.api_version();
            if (inst.api_version() >= VK_API_VERSION_1_1) L.features2 = vk.GetPhysicalDeviceFeatures2;
            if (inst.api_version() >= VK_API_VERSION_1_1)
                L.props2 = reinterpret_cast<PFN_vkGetPhysicalDeviceProperties2>(
                    vk.GetInstanceProcAddr(L.instance, "vkGetPhysicalDeviceProperties2"));
        } catch (const std::exception& e) {
            L.error = e.what();
            L.instance = VK_NULL_HANDLE;
        }
    });
    return L;
}

std::vector<VkPhysicalDevice> physical_devices(Loader& L) {
    uint32_t n = 0;
    check(L.enumerate(L.instance, &n, nullptr), "vkEnumeratePhysicalDevices");
    std::vector<VkPhysicalDevice> v(n);
    VkResult r = L.enumerate(L.instance, &n, v.data());
    if (r != VK_INCOMPLETE) check(r, "vkEnumeratePhysicalDevices");
    v.resize(n);
    return v;
}

// Whether the device lists the extension `ext`.
bool lists_extension(Loader& L, VkPhysicalDevice pd, const std::string& name, const char* ext) {
    uint32_t n = 0;
    check(L.device_extensions(pd, nullptr, &n, nullptr), "vkEnumerateDeviceExtensionProperties(" + name + ")");
    std::vector<VkExtensionProperties> exts(n);
    check(L.device_extensions(pd, nullptr, &n, exts.data()), "vkEnumerateDeviceExtensionProperties(" + name + ")", true);
    exts.resize(n);
    for (const auto& e : exts)
        if (std::strncmp(e.extensionName, ext, VK_MAX_EXTENSION_NAME_SIZE) == 0) return true;
    return false;
}

// True when the device can report its compiler's statistics per pipeline: it lists
// VK_KHR_pipeline_executable_properties and its pipelineExecutableInfo feature is on.
bool offers_pipeline_statistics(Loader& L, VkPhysicalDevice pd, const std::string& name) {
    if (!L.features2 || !lists_extension(L, pd, name, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME)) return false;
    VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR pe{};
    pe.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR;
    VkPhysicalDeviceFeatures2 f2{};
    f2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
    f2.pNext = &pe;
    L.features2(pd, &f2);
    return pe.pipelineExecutableInfo == VK_TRUE;
}

// True when the device lists VK_KHR_shader_clock with its subgroup clock (measuring: kernels
// built with clock stamps).
bool offers_shader_clock(Loader& L, VkPhysicalDevice pd, const std::string& name) {
    if (!L.features2 || !lists_extension(L, pd, name, VK_KHR_SHADER_CLOCK_EXTENSION_NAME)) return false;
    VkPhysicalDeviceShaderClockFeaturesKHR sc{};
    sc.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CLOCK_FEATURES_KHR;
    VkPhysicalDeviceFeatures2 f2{};
    f2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
    f2.pNext = &sc;
    L.features2(pd, &f2);
    return sc.shaderSubgroupClock == VK_TRUE;
}

}  // namespace

// "Register Count 64": the statistic's name as the driver gives it, then its value.
std::string statistic_line(const VkPipelineExecutableStatisticKHR& s) {
    std::string line(s.name, strnlen(s.name, VK_MAX_DESCRIPTION_SIZE));
    char v[64];
    switch (s.format) {
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR:
            std::snprintf(v, sizeof v, "%s", s.value.b32 ? "true" : "false");
            break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR:
            std::snprintf(v, sizeof v, "%lld", static_cast<long long>(s.value.i64));
            break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR:
            std::snprintf(v, sizeof v, "%llu", static_cast<unsigned long long>(s.value.u64));
            break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_FLOAT64_KHR:
            std::snprintf(v, sizeof v, "%g", s.value.f64);
            break;
        default:  // a format newer than these headers: its value cannot be read
            std::snprintf(v, sizeof v, "(format %d)", int(s.format));
            break;
    }
    return line + " " + v;
}

// The device-level entry points compute uses, from vkGetDeviceProcAddr.
#define BANKML_VK_DEVICE_FNS(X)                                                                       \
    X(DestroyDevice) X(GetDeviceQueue) X(DeviceWaitIdle) X(CreateBuffer) X(DestroyBuffer)             \
    X(GetBufferMemoryRequirements) X(AllocateMemory) X(FreeMemory) X(BindBufferMemory) X(MapMemory)  \
    X(CreateShaderModule) X(DestroyShaderModule) X(CreateDescriptorSetLayout)                         \
    X(DestroyDescriptorSetLayout) X(CreatePipelineLayout) X(DestroyPipelineLayout)                    \
    X(CreateComputePipelines) X(DestroyPipeline) X(CreateDescriptorPool) X(DestroyDescriptorPool)     \
    X(AllocateDescriptorSets) X(UpdateDescriptorSets) X(CreateCommandPool) X(DestroyCommandPool)      \
    X(AllocateCommandBuffers) X(ResetCommandBuffer) X(BeginCommandBuffer) X(EndCommandBuffer)         \
    X(CmdBindPipeline) X(CmdBindDescriptorSets) X(CmdPushConstants) X(CmdDispatch) X(CmdCopyBuffer)   \
    X(QueueSubmit) X(CreateFence) X(DestroyFence) X(WaitForFences) X(ResetFences) X(CreateQueryPool)     \
    X(DestroyQueryPool) X(CmdResetQueryPool) X(CmdWriteTimestamp) X(GetQueryPoolResults) X(GetFenceStatus)    \
    X(CmdPipelineBarrier) X(FreeCommandBuffers)

// VK_KHR_pipeline_executable_properties' queries, loaded only where the extension is enabled.
#define BANKML_VK_STATISTICS_FNS(X) X(GetPipelineExecutablePropertiesKHR) X(GetPipelineExecutableStatisticsKHR)

struct Gpu::Impl {
#define X(n) PFN_vk##n n = nullptr;
    BANKML_VK_DEVICE_FNS(X)
    BANKML_VK_STATISTICS_FNS(X)
#undef X
    bool statistics = false;  // VK_KHR_pipeline_executable_properties is enabled on dev
    bool shader_clock = false;  // VK_KHR_shader_clock is enabled on dev
    std::string name;
    Kind kind = Kind::Other;
    size_t index = 0;        // vkEnumeratePhysicalDevices order
    uint64_t heap_bytes = 0; // the heap buffer() allocates from
    Gpu::Limits limits;
    VkDevice dev = VK_NULL_HANDLE;
    VkQueue queue = VK_NULL_HANDLE;
    VkCommandPool pool = VK_NULL_HANDLE;
    VkCommandBuffer cmd = VK_NULL_HANDLE;
    VkFence fence = VK_NULL_HANDLE;
    VkQueryPool timestamps = VK_NULL_HANDLE;  // two per dispatch, where the queue has timestamps
    double timestamp_ns = 0;                  // nanoseconds per tick
    uint64_t timestamp_mask = 0;
    double last_us = -1;
    bool timed = false;                       // the submission in flight writes timestamps
    bool test_limits = false;                 // BANKML_GPU_TEST_LIMITS: limits overridden, no submission allowed
    VkPhysicalDeviceMemoryProperties mem{};
    int host_type = -1, devlocal_host_type = -1, devlocal_type = -1, cached_type = -1;
    struct Buf { VkBuffer buf; VkDeviceMemory mem; size_t bytes; };
    struct Pipe {
        VkShaderModule module; VkDescriptorSetLayout dsl; VkPipelineLayout layout; VkPipeline pipe;
        VkDescriptorPool dpool; VkDescriptorSet set; uint32_t bindings, push_bytes;
    };
    struct Seq { VkCommandBuffer cmd; VkDescriptorPool dpool; VkQueryPool stamps; size_t n; };
    const Seq* profiled = nullptr;  // the profiled sequence in flight or last waited
    std::vector<double> step_us;
    std::map<uint64_t, Buf> bufs;
    std::map<uint64_t, Pipe> pipes;
    std::map<uint64_t, Seq> seqs;
    bool f64 = false, int_dot = false;
    bool subgroup_arithmetic = false;
    uint32_t subgroup_size = 0;
    Gpu::FloatControls float_controls;
    std::string float_controls_detail = "no Vulkan 1.2 properties";
    uint64_t next_id = 1;
    std::atomic<uint64_t> allocated{0};  // read by the limiter from other threads
    bool pending = false;
    int spin_us = SPIN_US;

    ~Impl() {
        if (!dev) return;
        DeviceWaitIdle(dev);
        for (auto& [id, q] : seqs) {
            DestroyDescriptorPool(dev, q.dpool, nullptr);
            if (q.stamps) DestroyQueryPool(dev, q.stamps, nullptr);
        }
        for (auto& [id, p] : pipes) {
            DestroyPipeline(dev, p.pipe, nullptr);
            DestroyDescriptorPool(dev, p.dpool, nullptr);
            DestroyPipelineLayout(dev, p.layout, nullptr);
            DestroyDescriptorSetLayout(dev, p.dsl, nullptr);
            DestroyShaderModule(dev, p.module, nullptr);
        }
        for (auto& [id, b] : bufs) {
            DestroyBuffer(dev, b.buf, nullptr);
            FreeMemory(dev, b.mem, nullptr);
        }
        if (timestamps) DestroyQueryPool(dev, timestamps, nullptr);
        if (fence) DestroyFence(dev, fence, nullptr);
        if (pool) DestroyCommandPool(dev, pool, nullptr);
        DestroyDevice(dev, nullptr);
    }

    int find_type(VkMemoryPropertyFlags want, VkMemoryPropertyFlags avoid = 0) const {
        for (uint32_t i = 0; i < mem.memoryTypeCount; ++i) {
            auto f = mem.memoryTypes[i].propertyFlags;
            if ((f & want) == want && !(f & avoid)) return int(i);
        }
        return -1;
    }

    // `order`: memory types to try, preferred first; `host`: map it for its life.
    Buffer make(size_t bytes, bool host, std::vector<int> order) {
        if (bytes == 0) throw Error("Gpu::buffer(0): a buffer needs at least one byte");
        VkBufferCreateInfo bi{};
        bi.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
        bi.size = bytes;
        bi.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
        bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
        VkBuffer buf;
        check(CreateBuffer(dev, &bi, nullptr, &buf), "vkCreateBuffer(" + std::to_string(bytes) + " bytes)");
        VkMemoryRequirements req;
        GetBufferMemoryRequirements(dev, buf, &req);
        // Preferred memory first; a type the buffer cannot use, or a heap that is full, falls back.
        VkResult r = VK_ERROR_OUT_OF_DEVICE_MEMORY;
        VkDeviceMemory m = VK_NULL_HANDLE;
        int used = -1;
        for (int t : order) {
            if (t < 0 || !(req.memoryTypeBits & (1u << t))) continue;
            VkMemoryAllocateInfo ai{};
            ai.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
            ai.allocationSize = req.size;
            ai.memoryTypeIndex = uint32_t(t);
            r = AllocateMemory(dev, &ai, nullptr, &m);
            if (r == VK_SUCCESS) { used = t; break; }
        }
        if (used < 0) {
            DestroyBuffer(dev, buf, nullptr);
            throw Error("vkAllocateMemory(" + std::to_string(bytes) + " bytes) failed: " + result_name(r));
        }
        auto fail = [&](VkResult rr, const char* call) {
            FreeMemory(dev, m, nullptr);
            DestroyBuffer(dev, buf, nullptr);
            check(rr, call);
        };
        if (VkResult rr = BindBufferMemory(dev, buf, m, 0); rr != VK_SUCCESS) fail(rr, "vkBindBufferMemory");
        void* p = nullptr;
        if (host)
            if (VkResult rr = MapMemory(dev, m, 0, VK_WHOLE_SIZE, 0, &p); rr != VK_SUCCESS) fail(rr, "vkMapMemory");
        uint64_t id = next_id++;
        bufs[id] = {buf, m, bytes};
        allocated += bytes;
        return Buffer{id, bytes, p};
    }

    const Buf& get(const Buffer& b) const {
        auto it = bufs.find(b.id);
        if (it == bufs.end()) throw Error("Gpu: buffer " + std::to_string(b.id) + " is not live on this card");
        return it->second;
    }

    void begin() {
        if (pending) throw Error("Gpu::submit: a submission is already in flight (wait() first)");
        check(ResetCommandBuffer(cmd, 0), "vkResetCommandBuffer");
        VkCommandBufferBeginInfo bi{};
        bi.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
        bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
        check(BeginCommandBuffer(cmd, &bi), "vkBeginCommandBuffer");
    }

    void end_and_submit() {
        check(EndCommandBuffer(cmd), "vkEndCommandBuffer");
        check(ResetFences(dev, 1, &fence), "vkResetFences");
        VkSubmitInfo si{};
        si.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
        si.commandBufferCount = 1;
        si.pCommandBuffers = &cmd;
        check(QueueSubmit(queue, 1, &si, fence), "vkQueueSubmit");
        pending = true;
    }
};

std::vector<PhysicalDevice> Gpu::devices() {
    Loader& L = loader();
    std::vector<PhysicalDevice> out;
    if (!L.instance) return out;
    auto pds = physical_devices(L);
    for (size_t i = 0; i < pds.size(); ++i) {
        VkPhysicalDeviceProperties p;
        L.props(pds[i], &p);
        out.push_back({i, p.deviceName, vulkan::kind_of(p.deviceType, p.deviceName)});
    }
    return out;
}

Gpu Gpu::open(size_t index) {
    Loader& L = loader();
    if (!L.instance) throw Error("Gpu::open(" + std::to_string(index) + "): " + L.error);
    auto pds = physical_devices(L);
    if (index >= pds.size())
        throw Error("Gpu::open(" + std::to_string(index) + "): Vulkan has " + std::to_string(pds.size()) + " devices");
    VkPhysicalDevice pd = pds[index];
    auto d = std::make_unique<Impl>();
    VkPhysicalDeviceProperties props;
    L.props(pd, &props);
    d->name = props.deviceName;
    d->kind = vulkan::kind_of(props.deviceType, d->name);
    d->index = index;
    d->limits = {props.limits.maxComputeWorkGroupInvocations, props.limits.maxComputeWorkGroupSize[0],
                 props.limits.maxComputeSharedMemorySize};
    // Test hook: BANKML_GPU_TEST_LIMITS=invocations,size_x,shared_bytes makes the card report these
    // workgroup limits, to show on any machine that a card below the kernels' needs is refused before
    // any dispatch. Such a card refuses every submission, so a dispatch ahead of the check fails.
    if (const char* v = std::getenv("BANKML_GPU_TEST_LIMITS")) {
        unsigned a = 0, b = 0, c = 0;
        char end = 0;
        if (std::sscanf(v, "%u,%u,%u%c", &a, &b, &c, &end) != 3)
            throw Error(std::string("BANKML_GPU_TEST_LIMITS='") + v + "': expected invocations,size_x,shared_bytes", 2);
        d->limits = {a, b, c};
        d->test_limits = true;
    }
    if (props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU) d->spin_us = 0;
    if (VK_API_VERSION_MINOR(props.apiVersion) < 1 && VK_API_VERSION_MAJOR(props.apiVersion) <= 1)
        throw Error("Gpu::open(" + std::to_string(index) + "): " + d->name + " supports only Vulkan 1.0");
    uint32_t nq = 0;
    L.queue_props(pd, &nq, nullptr);
    std::vector<VkQueueFamilyProperties> qf(nq);
    L.queue_props(pd, &nq, qf.data());
    int family = -1;
    // A compute family without graphics first (a dedicated compute queue), else any compute family.
    for (uint32_t i = 0; i < nq && family < 0; ++i)
        if ((qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && !(qf[i].queueFlags & VK_QUEUE_GRAPHICS_BIT)) family = int(i);
    for (uint32_t i = 0; i < nq && family < 0; ++i)
        if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) family = int(i);
    if (family < 0) throw Error("Gpu::open(" + std::to_string(index) + "): " + d->name + " has no compute queue");
    float prio = 1.0f;
    VkDeviceQueueCreateInfo qi{};
    qi.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO;
    qi.queueFamilyIndex = uint32_t(family);
    qi.queueCount = 1;
    qi.pQueuePriorities = &prio;
    VkDeviceCreateInfo di{};
    di.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO;
    di.queueCreateInfoCount = 1;
    di.pQueueCreateInfos = &qi;
    // 64-bit floats where the card has them: the exact kernels of the forward pass need them.
    VkPhysicalDeviceFeatures have{}, want{};
    if (L.features) L.features(pd, &have);
    want.shaderFloat64 = have.shaderFloat64;
    d->f64 = have.shaderFloat64 == VK_TRUE;
    // Float controls are core from Vulkan 1.2 (the instance asks for 1.3).
    if (L.props2 && VK_API_VERSION_MINOR(props.apiVersion) >= 2) {
        VkPhysicalDeviceFloatControlsProperties fc{};
        fc.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FLOAT_CONTROLS_PROPERTIES;
        VkPhysicalDeviceProperties2 p2{};
        p2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
        p2.pNext = &fc;
        L.props2(pd, &p2);
        d->float_controls = {fc.shaderDenormPreserveFloat32 == VK_TRUE, fc.shaderDenormPreserveFloat64 == VK_TRUE,
                             fc.shaderSignedZeroInfNanPreserveFloat32 == VK_TRUE,
                             fc.shaderSignedZeroInfNanPreserveFloat64 == VK_TRUE};
        auto yn = [](VkBool32 b) { return b ? "yes" : "no"; };
        d->float_controls_detail = std::string("denorm preserve f32 ") + yn(fc.shaderDenormPreserveFloat32) + ", f64 " +
                                   yn(fc.shaderDenormPreserveFloat64) + "; signed zero/inf/nan preserve f32 " +
                                   yn(fc.shaderSignedZeroInfNanPreserveFloat32) + ", f64 " +
                                   yn(fc.shaderSignedZeroInfNanPreserveFloat64);
    }
    // Subgroups (Vulkan 1.1): their size, and whether compute shaders may use the basic and the
    // arithmetic group operations (no feature to enable; the properties say what the card runs).
    if (L.props2 && props.apiVersion >= VK_API_VERSION_1_1) {
        VkPhysicalDeviceSubgroupProperties sg{};
        sg.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES;
        VkPhysicalDeviceProperties2 p2{};
        p2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
        p2.pNext = &sg;
        L.props2(pd, &p2);
        const VkSubgroupFeatureFlags need = VK_SUBGROUP_FEATURE_BASIC_BIT | VK_SUBGROUP_FEATURE_ARITHMETIC_BIT;
        d->subgroup_size = sg.subgroupSize;
        d->subgroup_arithmetic = (sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) && (sg.supportedOperations & need) == need &&
                                 sg.subgroupSize >= 1;
        // Test hook: BANKML_GPU_NO_SUBGROUPS=1 makes the card report none (the workgroup tree).
        if (const char* v = std::getenv("BANKML_GPU_NO_SUBGROUPS"); v && std::string(v) == "1") d->subgroup_arithmetic = false;
    }
    di.pEnabledFeatures = &want;
    // The packed 8-bit dot product where the card has it (core in Vulkan 1.3; the Q2_0 products).
    VkPhysicalDeviceShaderIntegerDotProductFeatures dot{};
    dot.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES;
    if (L.features2 && L.api >= VK_API_VERSION_1_3 && props.apiVersion >= VK_API_VERSION_1_3) {
        VkPhysicalDeviceFeatures2 f2{};
        f2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
        f2.pNext = &dot;
        L.features2(pd, &f2);
        d->int_dot = dot.shaderIntegerDotProduct == VK_TRUE;
        dot.pNext = const_cast<void*>(di.pNext);
        if (d->int_dot) di.pNext = &dot;
    }
    // Where the driver can say what its compiler made of each kernel (registers, code size), ask
    // it to: the extension and its one feature, nothing else.
    const char* stats_ext = VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME;
    VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR stats_feature{};
    stats_feature.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR;
    stats_feature.pipelineExecutableInfo = VK_TRUE;
    std::vector<const char*> exts;
    if (offers_pipeline_statistics(L, pd, d->name)) {
        stats_feature.pNext = const_cast<void*>(di.pNext);
        di.pNext = &stats_feature;
        exts.push_back(stats_ext);
        d->statistics = true;
    }
    // BANKML_GPU_CLOCK=1 (measuring): the subgroup clock, for kernels built with clock stamps.
    VkPhysicalDeviceShaderClockFeaturesKHR clock_feature{};
    clock_feature.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CLOCK_FEATURES_KHR;
    clock_feature.shaderSubgroupClock = VK_TRUE;
    const char* clock_env = std::getenv("BANKML_GPU_CLOCK");
    if (clock_env && std::string(clock_env) == "1" && offers_shader_clock(L, pd, d->name)) {
        clock_feature.pNext = const_cast<void*>(di.pNext);
        di.pNext = &clock_feature;
        exts.push_back(VK_KHR_SHADER_CLOCK_EXTENSION_NAME);
        d->shader_clock = true;
    }
    di.enabledExtensionCount = uint32_t(exts.size());
    di.ppEnabledExtensionNames = exts.empty() ? nullptr : exts.data();
    check(L.create_device(pd, &di, nullptr, &d->dev), "vkCreateDevice(" + d->name + ")");
    bool missing = false;
#define X(n) d->n = reinterpret_cast<PFN_vk##n>(L.gdpa(d->dev, "vk" #n)); missing |= !d->n;
    BANKML_VK_DEVICE_FNS(X)
#undef X
    if (missing) {
        auto destroy = reinterpret_cast<PFN_vkDestroyDevice>(L.gdpa(d->dev, "vkDestroyDevice"));
        if (destroy) destroy(d->dev, nullptr);
        d->dev = VK_NULL_HANDLE;
        throw Error("vkGetDeviceProcAddr: " + d->name + " lacks a Vulkan 1.0 device entry point");
    }
    if (d->statistics) {
        // An enabled extension must have its entry points; a driver without them reports nothing.
#define X(n) d->n = reinterpret_cast<PFN_vk##n>(L.gdpa(d->dev, "vk" #n)); d->statistics &= d->n != nullptr;
        BANKML_VK_STATISTICS_FNS(X)
#undef X
    }
    d->GetDeviceQueue(d->dev, uint32_t(family), 0, &d->queue);
    L.mem_props(pd, &d->mem);
    const auto HV = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    d->devlocal_host_type = d->find_type(HV | VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
    d->host_type = d->find_type(HV);
    d->cached_type = d->find_type(HV | VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
    d->devlocal_type = d->find_type(VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT);
    if (d->devlocal_type < 0) d->devlocal_type = d->find_type(VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
    if (d->host_type < 0) throw Error("Gpu::open(" + std::to_string(index) + "): " + d->name + " has no host-visible coherent memory");
    const int first = d->devlocal_host_type >= 0 ? d->devlocal_host_type : d->host_type;
    d->heap_bytes = d->mem.memoryHeaps[d->mem.memoryTypes[first].heapIndex].size;

    VkCommandPoolCreateInfo pi{};
    pi.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
    pi.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    pi.queueFamilyIndex = uint32_t(family);
    check(d->CreateCommandPool(d->dev, &pi, nullptr, &d->pool), "vkCreateCommandPool");
    VkCommandBufferAllocateInfo ai{};
    ai.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
    ai.commandPool = d->pool;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    check(d->AllocateCommandBuffers(d->dev, &ai, &d->cmd), "vkAllocateCommandBuffers");
    VkFenceCreateInfo fi{};
    fi.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO;
    check(d->CreateFence(d->dev, &fi, nullptr, &d->fence), "vkCreateFence");
    uint32_t bits = qf[size_t(family)].timestampValidBits;
    if (bits > 0 && props.limits.timestampPeriod > 0) {
        VkQueryPoolCreateInfo qpi{};
        qpi.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO;
        qpi.queryType = VK_QUERY_TYPE_TIMESTAMP;
        qpi.queryCount = 2;
        check(d->CreateQueryPool(d->dev, &qpi, nullptr, &d->timestamps), "vkCreateQueryPool(2 timestamps)");
        d->timestamp_ns = double(props.limits.timestampPeriod);
        d->timestamp_mask = bits >= 64 ? ~uint64_t(0) : (uint64_t(1) << bits) - 1;
    }
    return Gpu(std::move(d));
}

Gpu::Gpu(std::unique_ptr<Impl> impl) : d_(std::move(impl)) {}
Gpu::Gpu(Gpu&&) noexcept = default;
Gpu& Gpu::operator=(Gpu&&) noexcept = default;
Gpu::~Gpu() = default;

const std::string& Gpu::name() const { return d_->name; }
const Gpu::Limits& Gpu::limits() const { return d_->limits; }
bool Gpu::has_shader_clock() const { return d_->shader_clock; }
bool Gpu::device_local_buffers() const { return d_->devlocal_host_type >= 0; }

Buffer Gpu::buffer(size_t bytes) { return d_->make(bytes, true, {d_->devlocal_host_type, d_->host_type}); }
// The CPU reads a device-local host-visible buffer across the bus, uncached: on the H200 reading
// a worker's output rows that way cost about a millisecond per product. Host-cached system memory
// is read at memory speed; the card's writes to it are small.
Buffer Gpu::readback_buffer(size_t bytes) {
    return d_->make(bytes, true, {d_->cached_type, d_->host_type, d_->devlocal_host_type});
}
Buffer Gpu::device_buffer(size_t bytes) {
    if (d_->devlocal_type < 0) throw Error("Gpu::device_buffer: " + d_->name + " has no device-local memory");
    return d_->make(bytes, false, {d_->devlocal_type});
}

void Gpu::write_bytes(const Buffer& b, const void* data, size_t bytes) {
    d_->get(b);
    if (!b.mapped) throw Error("Gpu::write: buffer " + std::to_string(b.id) + " is not host-visible");
    if (bytes > b.bytes)
        throw Error("Gpu::write: " + std::to_string(bytes) + " bytes into a buffer of " + std::to_string(b.bytes));
    if (bytes) std::memcpy(b.mapped, data, bytes);
}

std::vector<float> Gpu::read_f32(const Buffer& b, size_t n) const {
    d_->get(b);
    if (!b.mapped) throw Error("Gpu::read_f32: buffer " + std::to_string(b.id) + " is not host-visible");
    if (n * 4 > b.bytes)
        throw Error("Gpu::read_f32: " + std::to_string(n) + " floats from a buffer of " + std::to_string(b.bytes) + " bytes");
    std::vector<float> v(n);
    if (n) std::memcpy(v.data(), b.mapped, n * 4);
    return v;
}

uint64_t Gpu::allocated() const { return d_->allocated.load(std::memory_order_relaxed); }
uint64_t Gpu::heap_bytes() const { return d_->heap_bytes; }
Kind Gpu::kind() const { return d_->kind; }
size_t Gpu::index() const { return d_->index; }

void Gpu::free(Buffer& b) {
    const auto& x = d_->get(b);
    if (d_->pending) wait();  // the submission in flight may still read it
    d_->DestroyBuffer(d_->dev, x.buf, nullptr);
    d_->FreeMemory(d_->dev, x.mem, nullptr);
    d_->allocated -= x.bytes;
    d_->bufs.erase(b.id);
    b = Buffer{};
}

Pipeline Gpu::pipeline(std::span<const uint32_t> spirv, uint32_t bindings, uint32_t push_bytes, std::span<const SpecValue> spec) {
    Impl& d = *d_;
    if (spirv.size() < 5 || spirv[0] != 0x07230203u) throw Error("Gpu::pipeline: the SPIR-V is empty or has no header");
    // Each constant's 4 bytes at 4·i of the data.
    std::vector<VkSpecializationMapEntry> entries(spec.size());
    std::vector<uint32_t> values(spec.size());
    for (size_t i = 0; i < spec.size(); ++i) {
        for (size_t j = 0; j < i; ++j)
            if (spec[j].id == spec[i].id)
                throw Error("Gpu::pipeline: specialisation constant " + std::to_string(spec[i].id) + " given twice");
        entries[i] = {spec[i].id, uint32_t(4 * i), 4};
        values[i] = spec[i].value;
    }
    VkSpecializationInfo spi{};
    spi.mapEntryCount = uint32_t(entries.size());
    spi.pMapEntries = entries.data();
    spi.dataSize = values.size() * 4;
    spi.pData = values.data();
    Impl::Pipe p{};
    p.bindings = bindings;
    p.push_bytes = push_bytes;
    // Objects made so far are destroyed if a later step fails.
    struct Undo {
        Impl& d; Impl::Pipe& p; bool keep = false;
        ~Undo() {
            if (keep) return;
            if (p.pipe) d.DestroyPipeline(d.dev, p.pipe, nullptr);
            if (p.dpool) d.DestroyDescriptorPool(d.dev, p.dpool, nullptr);
            if (p.layout) d.DestroyPipelineLayout(d.dev, p.layout, nullptr);
            if (p.dsl) d.DestroyDescriptorSetLayout(d.dev, p.dsl, nullptr);
            if (p.module) d.DestroyShaderModule(d.dev, p.module, nullptr);
        }
    } undo{d, p};
    VkShaderModuleCreateInfo si{};
    si.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO;
    si.codeSize = spirv.size() * 4;
    si.pCode = spirv.data();
    check(d.CreateShaderModule(d.dev, &si, nullptr, &p.module), "vkCreateShaderModule(" + std::to_string(spirv.size()) + " words)");
    std::vector<VkDescriptorSetLayoutBinding> lb(bindings);
    for (uint32_t i = 0; i < bindings; ++i) {
        lb[i] = {};
        lb[i].binding = i;
        lb[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
        lb[i].descriptorCount = 1;
        lb[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
    }
    VkDescriptorSetLayoutCreateInfo li{};
    li.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO;
    li.bindingCount = bindings;
    li.pBindings = lb.data();
    check(d.CreateDescriptorSetLayout(d.dev, &li, nullptr, &p.dsl), "vkCreateDescriptorSetLayout");
    VkPushConstantRange pr{VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes};
    VkPipelineLayoutCreateInfo pli{};
    pli.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO;
    pli.setLayoutCount = 1;
    pli.pSetLayouts = &p.dsl;
    pli.pushConstantRangeCount = push_bytes ? 1 : 0;
    pli.pPushConstantRanges = &pr;
    check(d.CreatePipelineLayout(d.dev, &pli, nullptr, &p.layout), "vkCreatePipelineLayout");
    VkComputePipelineCreateInfo ci{};
    ci.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO;
    ci.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
    ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    ci.stage.module = p.module;
    ci.stage.pName = "main";
    ci.stage.pSpecializationInfo = spec.empty() ? nullptr : &spi;
    ci.layout = p.layout;
    // Statistics only: internal representations (the driver's IR and assembly) cost more to keep.
    if (d.statistics) ci.flags = VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
    check(d.CreateComputePipelines(d.dev, VK_NULL_HANDLE, 1, &ci, nullptr, &p.pipe), "vkCreateComputePipelines");
    VkDescriptorPoolSize ps{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, bindings ? bindings : 1};
    VkDescriptorPoolCreateInfo dpi{};
    dpi.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO;
    dpi.maxSets = 1;
    dpi.poolSizeCount = 1;
    dpi.pPoolSizes = &ps;
    check(d.CreateDescriptorPool(d.dev, &dpi, nullptr, &p.dpool), "vkCreateDescriptorPool");
    VkDescriptorSetAllocateInfo dai{};
    dai.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO;
    dai.descriptorPool = p.dpool;
    dai.descriptorSetCount = 1;
    dai.pSetLayouts = &p.dsl;
    check(d.AllocateDescriptorSets(d.dev, &dai, &p.set), "vkAllocateDescriptorSets");
    undo.keep = true;
    uint64_t id = d.next_id++;
    d.pipes[id] = p;
    return Pipeline{id, bindings, push_bytes};
}

bool Gpu::has_pipeline_statistics() const { return d_->statistics; }

std::vector<std::string> Gpu::pipeline_statistics(const Pipeline& pl) const {
    const Impl& d = *d_;
    auto it = d.pipes.find(pl.id);
    if (it == d.pipes.end())
        throw Error("Gpu::pipeline_statistics: pipeline " + std::to_string(pl.id) + " is not on this card");
    std::vector<std::string> out;
    if (!d.statistics) return out;
    VkPipelineInfoKHR pi{};
    pi.sType = VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR;
    pi.pipeline = it->second.pipe;
    // Only the count of executables is needed: each one's statistics are asked for by its index.
    uint32_t n = 0;
    check(d.GetPipelineExecutablePropertiesKHR(d.dev, &pi, &n, nullptr), "vkGetPipelineExecutablePropertiesKHR");
    for (uint32_t i = 0; i < n; ++i) {
        VkPipelineExecutableInfoKHR ei{};
        ei.sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR;
        ei.pipeline = pi.pipeline;
        ei.executableIndex = i;
        uint32_t ns = 0;
        check(d.GetPipelineExecutableStatisticsKHR(d.dev, &ei, &ns, nullptr), "vkGetPipelineExecutableStatisticsKHR");
        std::vector<VkPipelineExecutableStatisticKHR> stats(ns);
        for (auto& s : stats) s.sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR;
        check(d.GetPipelineExecutableStatisticsKHR(d.dev, &ei, &ns, stats.data()), "vkGetPipelineExecutableStatisticsKHR", true);
        for (uint32_t k = 0; k < ns; ++k) out.push_back(statistic_line(stats[k]));
    }
    return out;
}

void Gpu::submit(const Pipeline& pl, std::span<const Buffer* const> bufs, std::span<const uint32_t> push, uint32_t groups) {
    Impl& d = *d_;
    auto it = d.pipes.find(pl.id);
    if (it == d.pipes.end()) throw Error("Gpu::submit: pipeline " + std::to_string(pl.id) + " is not on this card");
    const Impl::Pipe& p = it->second;
    if (d.test_limits) throw Error("Gpu::submit: the card's limits are overridden by BANKML_GPU_TEST_LIMITS; nothing may run on it");
    if (bufs.size() != p.bindings)
        throw Error("Gpu::submit: " + std::to_string(bufs.size()) + " buffers for " + std::to_string(p.bindings) + " bindings");
    if (push.size() * 4 != p.push_bytes)
        throw Error("Gpu::submit: " + std::to_string(push.size() * 4) + " push bytes for " + std::to_string(p.push_bytes));
    if (d.pending) throw Error("Gpu::submit: a submission is already in flight (wait() first)");
    // One set per pipeline, rewritten per dispatch: safe because nothing is in flight now.
    std::vector<VkDescriptorBufferInfo> bi(bufs.size());
    std::vector<VkWriteDescriptorSet> w(bufs.size());
    for (size_t i = 0; i < bufs.size(); ++i) {
        bi[i] = {d.get(*bufs[i]).buf, 0, VK_WHOLE_SIZE};
        w[i] = {};
        w[i].sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
        w[i].dstSet = p.set;
        w[i].dstBinding = uint32_t(i);
        w[i].descriptorCount = 1;
        w[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
        w[i].pBufferInfo = &bi[i];
    }
    if (!w.empty()) d.UpdateDescriptorSets(d.dev, uint32_t(w.size()), w.data(), 0, nullptr);
    d.begin();
    d.CmdBindPipeline(d.cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p.pipe);
    d.CmdBindDescriptorSets(d.cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p.layout, 0, 1, &p.set, 0, nullptr);
    if (p.push_bytes) d.CmdPushConstants(d.cmd, p.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, p.push_bytes, push.data());
    if (d.timestamps) {
        d.CmdResetQueryPool(d.cmd, d.timestamps, 0, 2);
        d.CmdWriteTimestamp(d.cmd, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, d.timestamps, 0);
    }
    d.CmdDispatch(d.cmd, groups, 1, 1);
    if (d.timestamps) d.CmdWriteTimestamp(d.cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, d.timestamps, 1);
    d.end_and_submit();
    d.timed = d.timestamps != VK_NULL_HANDLE;
}

void Gpu::wait() {
    Impl& d = *d_;
    if (!d.pending) throw Error("Gpu::wait: no submission in flight");
    d.pending = false;
    // Poll briefly before sleeping: a blocking wait costs a thread wake-up (the H200's median round
    // trip was 45 µs against a best of 14 µs), and most products finish within the spin.
    auto t0 = std::chrono::steady_clock::now();
    VkResult r = VK_NOT_READY;
    while ((r = d.GetFenceStatus(d.dev, d.fence)) == VK_NOT_READY &&
           std::chrono::steady_clock::now() - t0 < std::chrono::microseconds(d.spin_us)) {
    }
    if (r != VK_SUCCESS && r != VK_NOT_READY) check(r, "vkGetFenceStatus");
    if (r == VK_NOT_READY) check(d.WaitForFences(d.dev, 1, &d.fence, VK_TRUE, UINT64_MAX), "vkWaitForFences");
    d.last_us = -1;
    if (d.timed) {
        d.timed = false;
        uint64_t t[2] = {0, 0};
        check(d.GetQueryPoolResults(d.dev, d.timestamps, 0, 2, sizeof t, t, sizeof t[0],
                                    VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
              "vkGetQueryPoolResults(2 timestamps)");
        d.last_us = double((t[1] - t[0]) & d.timestamp_mask) * d.timestamp_ns / 1000.0;
    }
    if (d.profiled) {
        const Impl::Seq& q = *d.profiled;
        d.profiled = nullptr;
        std::vector<uint64_t> t(q.n + 1);
        check(d.GetQueryPoolResults(d.dev, q.stamps, 0, uint32_t(q.n + 1), t.size() * 8, t.data(), 8,
                                    VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
              "vkGetQueryPoolResults(" + std::to_string(q.n + 1) + " timestamps)");
        d.step_us.resize(q.n);
        for (size_t i = 0; i < q.n; ++i) d.step_us[i] = double((t[i + 1] - t[i]) & d.timestamp_mask) * d.timestamp_ns / 1000.0;
    }
}

double Gpu::last_dispatch_us() const { return d_->last_us; }
void Gpu::set_spin_us(int us) {
    if (d_->spin_us > 0) d_->spin_us = us;
}

void Gpu::run(const Pipeline& p, std::span<const Buffer* const> bufs, std::span<const uint32_t> push, uint32_t groups) {
    submit(p, bufs, push, groups);
    wait();
}

void Gpu::copy(const Buffer& src, const Buffer& dst, size_t bytes) {
    Impl& d = *d_;
    if (d.test_limits) throw Error("Gpu::copy: the card's limits are overridden by BANKML_GPU_TEST_LIMITS; nothing may run on it");
    if (bytes > src.bytes || bytes > dst.bytes) throw Error("Gpu::copy: " + std::to_string(bytes) + " bytes exceed a buffer");
    VkBuffer s = d.get(src).buf, t = d.get(dst).buf;
    d.begin();
    VkBufferCopy region{0, 0, bytes};
    d.CmdCopyBuffer(d.cmd, s, t, 1, &region);
    d.end_and_submit();
    wait();
}

bool Gpu::has_f64() const { return d_->f64; }
bool Gpu::has_int_dot() const { return d_->int_dot; }
bool Gpu::subgroup_arithmetic() const { return d_->subgroup_arithmetic; }
uint32_t Gpu::subgroup_size() const { return d_->subgroup_size; }
const Gpu::FloatControls& Gpu::float_controls() const { return d_->float_controls; }
const std::string& Gpu::float_controls_detail() const { return d_->float_controls_detail; }
std::vector<double> Gpu::step_us() const { return d_->step_us; }

Sequence Gpu::record(std::span<const Step> steps, bool profile) {
    Impl& d = *d_;
    if (steps.empty()) throw Error("Gpu::record: no steps");
    Impl::Seq q{};
    uint32_t sets = uint32_t(steps.size()), descriptors = 0;
    for (const Step& st : steps) {
        auto it = st.pipeline ? d.pipes.find(st.pipeline->id) : d.pipes.end();
        if (it == d.pipes.end()) throw Error("Gpu::record: a step's pipeline is not on this card");
        if (st.bufs.size() != it->second.bindings)
            throw Error("Gpu::record: " + std::to_string(st.bufs.size()) + " buffers for " + std::to_string(it->second.bindings) + " bindings");
        if (st.push.size() * 4 != it->second.push_bytes)
            throw Error("Gpu::record: " + std::to_string(st.push.size() * 4) + " push bytes for " + std::to_string(it->second.push_bytes));
        descriptors += it->second.bindings;
    }
    VkDescriptorPoolSize ps{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, descriptors ? descriptors : 1};
    VkDescriptorPoolCreateInfo dpi{};
    dpi.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO;
    dpi.maxSets = sets;
    dpi.poolSizeCount = 1;
    dpi.pPoolSizes = &ps;
    check(d.CreateDescriptorPool(d.dev, &dpi, nullptr, &q.dpool), "vkCreateDescriptorPool(" + std::to_string(sets) + " sets)");
    struct Undo {
        Impl& d; Impl::Seq& q; bool keep = false;
        ~Undo() {
            if (keep) return;
            if (q.cmd) d.FreeCommandBuffers(d.dev, d.pool, 1, &q.cmd);
            if (q.stamps) d.DestroyQueryPool(d.dev, q.stamps, nullptr);
            d.DestroyDescriptorPool(d.dev, q.dpool, nullptr);
        }
    } undo{d, q};
    VkCommandBufferAllocateInfo ai{};
    ai.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
    ai.commandPool = d.pool;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    check(d.AllocateCommandBuffers(d.dev, &ai, &q.cmd), "vkAllocateCommandBuffers");
    q.n = steps.size();
    if (profile && d.timestamps) {
        VkQueryPoolCreateInfo qpi{};
        qpi.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO;
        qpi.queryType = VK_QUERY_TYPE_TIMESTAMP;
        qpi.queryCount = uint32_t(steps.size() + 1);
        check(d.CreateQueryPool(d.dev, &qpi, nullptr, &q.stamps), "vkCreateQueryPool(" + std::to_string(steps.size() + 1) + " timestamps)");
    }
    VkCommandBufferBeginInfo bi{};
    bi.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
    check(d.BeginCommandBuffer(q.cmd, &bi), "vkBeginCommandBuffer");
    if (q.stamps) {
        d.CmdResetQueryPool(q.cmd, q.stamps, 0, uint32_t(steps.size() + 1));
        d.CmdWriteTimestamp(q.cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, q.stamps, 0);
    }
    if (d.timestamps) {
        d.CmdResetQueryPool(q.cmd, d.timestamps, 0, 2);
        d.CmdWriteTimestamp(q.cmd, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, d.timestamps, 0);
    }
    VkMemoryBarrier mb{};
    mb.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
    mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
    for (size_t i = 0; i < steps.size(); ++i) {
        const Step& st = steps[i];
        const Impl::Pipe& p = d.pipes.at(st.pipeline->id);
        VkDescriptorSet set;
        VkDescriptorSetAllocateInfo dai{};
        dai.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO;
        dai.descriptorPool = q.dpool;
        dai.descriptorSetCount = 1;
        dai.pSetLayouts = &p.dsl;
        check(d.AllocateDescriptorSets(d.dev, &dai, &set), "vkAllocateDescriptorSets(step " + std::to_string(i) + ")");
        std::vector<VkDescriptorBufferInfo> bi2(st.bufs.size());
        std::vector<VkWriteDescriptorSet> w(st.bufs.size());
        for (size_t b = 0; b < st.bufs.size(); ++b) {
            bi2[b] = {d.get(*st.bufs[b]).buf, 0, VK_WHOLE_SIZE};
            w[b] = {};
            w[b].sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
            w[b].dstSet = set;
            w[b].dstBinding = uint32_t(b);
            w[b].descriptorCount = 1;
            w[b].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
            w[b].pBufferInfo = &bi2[b];
        }
        if (!w.empty()) d.UpdateDescriptorSets(d.dev, uint32_t(w.size()), w.data(), 0, nullptr);
        if (i > 0 && st.after)
            d.CmdPipelineBarrier(q.cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb,
                                 0, nullptr, 0, nullptr);
        d.CmdBindPipeline(q.cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p.pipe);
        d.CmdBindDescriptorSets(q.cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p.layout, 0, 1, &set, 0, nullptr);
        if (p.push_bytes) d.CmdPushConstants(q.cmd, p.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, p.push_bytes, st.push.data());
        d.CmdDispatch(q.cmd, st.groups, 1, 1);
        if (q.stamps) d.CmdWriteTimestamp(q.cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, q.stamps, uint32_t(i + 1));
    }
    VkMemoryBarrier hb{};
    hb.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
    hb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
    hb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
    d.CmdPipelineBarrier(q.cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &hb, 0, nullptr, 0, nullptr);
    if (d.timestamps) d.CmdWriteTimestamp(q.cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, d.timestamps, 1);
    check(d.EndCommandBuffer(q.cmd), "vkEndCommandBuffer");
    undo.keep = true;
    uint64_t id = d.next_id++;
    d.seqs[id] = q;
    return Sequence{id, steps.size()};
}

void Gpu::submit(const Sequence& s) {
    Impl& d = *d_;
    auto it = d.seqs.find(s.id);
    if (it == d.seqs.end()) throw Error("Gpu::submit: sequence " + std::to_string(s.id) + " is not on this card");
    if (d.pending) throw Error("Gpu::submit: a submission is already in flight (wait() first)");
    check(d.ResetFences(d.dev, 1, &d.fence), "vkResetFences");
    VkSubmitInfo si{};
    si.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
    si.commandBufferCount = 1;
    si.pCommandBuffers = &it->second.cmd;
    check(d.QueueSubmit(d.queue, 1, &si, d.fence), "vkQueueSubmit(sequence of " + std::to_string(s.steps) + " dispatches)");
    d.pending = true;
    d.profiled = it->second.stamps ? &it->second : nullptr;
    d.timed = d.timestamps != VK_NULL_HANDLE;
}

void Gpu::free(Sequence& s) {
    Impl& d = *d_;
    auto it = d.seqs.find(s.id);
    if (it == d.seqs.end()) return;
    if (d.pending) wait();
    d.FreeCommandBuffers(d.dev, d.pool, 1, &it->second.cmd);
    d.DestroyDescriptorPool(d.dev, it->second.dpool, nullptr);
    if (it->second.stamps) d.DestroyQueryPool(d.dev, it->second.stamps, nullptr);
    if (d.profiled == &it->second) d.profiled = nullptr;
    d.seqs.erase(it);
    s = Sequence{};
}

std::vector<std::string> Gpu::validation_messages() {
    return vulkan::validation_messages();
}
bool Gpu::validation_enabled() { return loader().validation; }

}  // namespace bankml::gpu
