// Vulkan through dlopen: the loader, the entry points, the instance and device discovery.
#include "gpu/vulkan.h"

#include <dlfcn.h>
#if defined(__linux__)
#include <link.h>
#endif

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>

#include "core/error.h"

namespace bankml::gpu::vulkan {

std::string result_name(VkResult r) {
    switch (r) {
#define N(x) case x: return #x
    N(VK_SUCCESS);
    N(VK_NOT_READY);
    N(VK_TIMEOUT);
    N(VK_EVENT_SET);
    N(VK_EVENT_RESET);
    N(VK_INCOMPLETE);
    N(VK_ERROR_OUT_OF_HOST_MEMORY);
    N(VK_ERROR_OUT_OF_DEVICE_MEMORY);
    N(VK_ERROR_INITIALIZATION_FAILED);
    N(VK_ERROR_DEVICE_LOST);
    N(VK_ERROR_MEMORY_MAP_FAILED);
    N(VK_ERROR_LAYER_NOT_PRESENT);
    N(VK_ERROR_EXTENSION_NOT_PRESENT);
    N(VK_ERROR_FEATURE_NOT_PRESENT);
    N(VK_ERROR_INCOMPATIBLE_DRIVER);
    N(VK_ERROR_TOO_MANY_OBJECTS);
    N(VK_ERROR_FORMAT_NOT_SUPPORTED);
    N(VK_ERROR_FRAGMENTED_POOL);
    N(VK_ERROR_UNKNOWN);
    N(VK_ERROR_OUT_OF_POOL_MEMORY);
    N(VK_ERROR_INVALID_EXTERNAL_HANDLE);
    N(VK_ERROR_FRAGMENTATION);
    N(VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS);
    N(VK_PIPELINE_COMPILE_REQUIRED);
    N(VK_ERROR_SURFACE_LOST_KHR);
    N(VK_ERROR_NATIVE_WINDOW_IN_USE_KHR);
    N(VK_SUBOPTIMAL_KHR);
    N(VK_ERROR_OUT_OF_DATE_KHR);
    N(VK_ERROR_INCOMPATIBLE_DISPLAY_KHR);
    N(VK_ERROR_VALIDATION_FAILED_EXT);
    N(VK_ERROR_INVALID_SHADER_NV);
    N(VK_ERROR_NOT_PERMITTED_KHR);
#undef N
    default: return "VkResult(" + std::to_string(int(r)) + ")";
    }
}

void check(VkResult r, const std::string& call, bool allow_incomplete) {
    if (r == VK_SUCCESS || (allow_incomplete && r == VK_INCOMPLETE)) return;
    throw Error(call + " failed: " + result_name(r));
}

std::vector<std::string> loader_names() {
    if (const char* p = std::getenv("BANKML_VULKAN_LOADER"); p && *p) return {p};
    return {"libvulkan.so.1", "libvulkan.so", "libvulkan.1.dylib", "libMoltenVK.dylib"};
}

PFN_vkGetInstanceProcAddr open_loader() {
    auto names = loader_names();
    for (const auto& n : names) {
        // RTLD_LOCAL: the loader's symbols must not satisfy anyone else's. Never dlclosed: a
        // driver may keep threads or atexit handlers inside it.
        void* h = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!h) continue;
        auto gipa = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(h, "vkGetInstanceProcAddr"));
        if (gipa) return gipa;
        throw Error(n + " has no vkGetInstanceProcAddr: not a Vulkan loader");
    }
    throw Error("no Vulkan loader (" + names[0] + ") on this machine");
}

// Entry points that may be absent without making the instance useless.
template <class F>
static void get_optional(F& f, PFN_vkGetInstanceProcAddr gipa, VkInstance inst, const char* name) {
    f = reinterpret_cast<F>(gipa(inst, name));
}
template <class F>
static void get_required(F& f, PFN_vkGetInstanceProcAddr gipa, VkInstance inst, const char* name) {
    f = reinterpret_cast<F>(gipa(inst, name));
    if (!f) throw Error(std::string("vkGetInstanceProcAddr(") + name + ") returned null");
}

void Vk::load_global(PFN_vkGetInstanceProcAddr gipa) {
    GetInstanceProcAddr = gipa;
    get_required(CreateInstance, gipa, VK_NULL_HANDLE, "vkCreateInstance");
    get_optional(EnumerateInstanceVersion, gipa, VK_NULL_HANDLE, "vkEnumerateInstanceVersion");
    get_required(EnumerateInstanceExtensionProperties, gipa, VK_NULL_HANDLE, "vkEnumerateInstanceExtensionProperties");
}

void Vk::load_instance(VkInstance i) {
    auto g = GetInstanceProcAddr;
    get_required(DestroyInstance, g, i, "vkDestroyInstance");
    get_required(EnumeratePhysicalDevices, g, i, "vkEnumeratePhysicalDevices");
    get_required(GetPhysicalDeviceProperties, g, i, "vkGetPhysicalDeviceProperties");
    get_optional(GetPhysicalDeviceProperties2, g, i, "vkGetPhysicalDeviceProperties2");
    get_required(GetPhysicalDeviceFeatures, g, i, "vkGetPhysicalDeviceFeatures");
    get_optional(GetPhysicalDeviceFeatures2, g, i, "vkGetPhysicalDeviceFeatures2");
    get_required(GetPhysicalDeviceMemoryProperties, g, i, "vkGetPhysicalDeviceMemoryProperties");
    get_required(GetPhysicalDeviceQueueFamilyProperties, g, i, "vkGetPhysicalDeviceQueueFamilyProperties");
    get_required(EnumerateDeviceExtensionProperties, g, i, "vkEnumerateDeviceExtensionProperties");
    get_required(CreateDevice, g, i, "vkCreateDevice");
    get_required(GetDeviceProcAddr, g, i, "vkGetDeviceProcAddr");
    get_optional(CreateDebugUtilsMessengerEXT, g, i, "vkCreateDebugUtilsMessengerEXT");
    get_optional(DestroyDebugUtilsMessengerEXT, g, i, "vkDestroyDebugUtilsMessengerEXT");
}

// Keeps every library now mapped (the loader's drivers among them) for the life of the process.
// The loader unloads a driver when its last instance goes; a driver that registered atexit or
// thread-local destructors (Mesa, LLVM) then crashes the process at exit, and instance() and
// compute reload the same driver moments later anyway. It also lets LeakSanitizer name the driver
// of a leak inside it instead of an unmapped "<unknown module>".
static void pin_loaded_libraries() {
#if defined(__linux__) && defined(RTLD_NODELETE) && defined(RTLD_NOLOAD)
    std::vector<std::string> names;
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* out) -> int {
            if (info->dlpi_name && info->dlpi_name[0]) static_cast<std::vector<std::string>*>(out)->push_back(info->dlpi_name);
            return 0;
        },
        &names);
    // RTLD_NOLOAD only promotes the flags of a library already loaded; the handle is not closed
    // because a pinned library cannot be unloaded anyway.
    for (const auto& n : names) (void)dlopen(n.c_str(), RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
#endif
}

static bool has_extension(const std::vector<VkExtensionProperties>& exts, const char* name) {
    for (const auto& e : exts)
        if (std::strncmp(e.extensionName, name, VK_MAX_EXTENSION_NAME_SIZE) == 0) return true;
    return false;
}

static std::vector<VkExtensionProperties> instance_extensions(const Vk& vk) {
    uint32_t n = 0;
    // A failure here only costs the optional portability extension: not worth refusing Vulkan.
    if (vk.EnumerateInstanceExtensionProperties(nullptr, &n, nullptr) != VK_SUCCESS) return {};
    std::vector<VkExtensionProperties> v(n);
    VkResult r = vk.EnumerateInstanceExtensionProperties(nullptr, &n, v.data());
    if (r != VK_SUCCESS && r != VK_INCOMPLETE) return {};
    v.resize(n);
    return v;
}

static std::mutex g_messages_mutex;
static std::vector<std::string> g_messages;

static VKAPI_ATTR VkBool32 VKAPI_CALL on_validation_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                            VkDebugUtilsMessageTypeFlagsEXT,
                                                            const VkDebugUtilsMessengerCallbackDataEXT* data, void*) {
    if (severity >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT) {
        std::lock_guard<std::mutex> lock(g_messages_mutex);
        if (g_messages.size() < 10000) g_messages.push_back(data && data->pMessage ? data->pMessage : "(no message)");
    }
    return VK_FALSE;  // the call goes on as it would without the layer
}

std::vector<std::string> validation_messages() {
    std::lock_guard<std::mutex> lock(g_messages_mutex);
    return g_messages;
}

static bool has_layer(const Vk& vk, const char* name) {
    auto enumerate = reinterpret_cast<PFN_vkEnumerateInstanceLayerProperties>(
        vk.GetInstanceProcAddr(VK_NULL_HANDLE, "vkEnumerateInstanceLayerProperties"));
    if (!enumerate) return false;
    uint32_t n = 0;
    if (enumerate(&n, nullptr) != VK_SUCCESS) return false;
    std::vector<VkLayerProperties> v(n);
    VkResult r = enumerate(&n, v.data());
    if (r != VK_SUCCESS && r != VK_INCOMPLETE) return false;
    for (uint32_t i = 0; i < n && i < v.size(); i++)
        if (std::strncmp(v[i].layerName, name, VK_MAX_EXTENSION_NAME_SIZE) == 0) return true;
    return false;
}

Instance::Instance(bool validation) {
    vk_.load_global(open_loader());
    uint32_t loader_version = VK_API_VERSION_1_0;
    if (vk_.EnumerateInstanceVersion) {
        check(vk_.EnumerateInstanceVersion(&loader_version), "vkEnumerateInstanceVersion");
    }
    // Newest up to 1.3: a 1.0 loader refuses anything above 1.0 with VK_ERROR_INCOMPATIBLE_DRIVER.
    api_ = loader_version > VK_API_VERSION_1_3 ? VK_API_VERSION_1_3 : loader_version;

    VkApplicationInfo app{};
    app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
    app.pApplicationName = "bankml";
    app.applicationVersion = 1;
    app.pEngineName = "bankml";
    app.engineVersion = 1;
    app.apiVersion = api_;

    std::vector<const char*> exts;
    VkInstanceCreateInfo ci{};
    ci.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
    ci.pApplicationInfo = &app;
    // MoltenVK lists its devices only to instances that ask for portability enumeration.
    if (has_extension(instance_extensions(vk_), VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME)) {
        exts.push_back(VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME);
        ci.flags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
    }
    const char* layer = "VK_LAYER_KHRONOS_validation";
    if (validation && has_layer(vk_, layer)) {
        ci.enabledLayerCount = 1;
        ci.ppEnabledLayerNames = &layer;
        exts.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);  // the layer implements it
    } else {
        validation = false;
    }
    ci.enabledExtensionCount = uint32_t(exts.size());
    ci.ppEnabledExtensionNames = exts.empty() ? nullptr : exts.data();
    VkResult created = vk_.CreateInstance(&ci, nullptr, &inst_);
    if (created == VK_ERROR_INCOMPATIBLE_DRIVER)
        // What the loader answers when no driver loads at all (none installed, or one missing a
        // library of its own, as NVIDIA's ICD without libGLdispatch): say where to look.
        throw Error("vkCreateInstance(api " + api_version_string(api_) +
                    ") failed: VK_ERROR_INCOMPATIBLE_DRIVER (no Vulkan driver could be loaded; "
                    "VK_LOADER_DEBUG=error,warn shows why)");
    check(created, "vkCreateInstance(api " + api_version_string(api_) + ")");
    if (inst_ == VK_NULL_HANDLE) throw Error("vkCreateInstance returned VK_SUCCESS and no instance");
    pin_loaded_libraries();
    try {
        vk_.load_instance(inst_);
        if (validation && vk_.CreateDebugUtilsMessengerEXT) {
            VkDebugUtilsMessengerCreateInfoEXT mi{};
            mi.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT;
            mi.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
            mi.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                             VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
            mi.pfnUserCallback = on_validation_message;
            check(vk_.CreateDebugUtilsMessengerEXT(inst_, &mi, nullptr, &messenger_), "vkCreateDebugUtilsMessengerEXT");
        }
    } catch (...) {
        // DestroyInstance may be the very entry point that is missing.
        auto destroy = reinterpret_cast<PFN_vkDestroyInstance>(vk_.GetInstanceProcAddr(inst_, "vkDestroyInstance"));
        if (destroy) destroy(inst_, nullptr);
        inst_ = VK_NULL_HANDLE;
        throw;
    }
}

Instance::~Instance() {
    if (messenger_ != VK_NULL_HANDLE && vk_.DestroyDebugUtilsMessengerEXT)
        vk_.DestroyDebugUtilsMessengerEXT(inst_, messenger_, nullptr);
    if (inst_ != VK_NULL_HANDLE && vk_.DestroyInstance) vk_.DestroyInstance(inst_, nullptr);
}

std::vector<VkPhysicalDevice> Instance::physical_devices() const {
    // VK_INCOMPLETE: a device appeared between the two calls (a hot-plugged card); ask again.
    for (int attempt = 0;; attempt++) {
        uint32_t n = 0;
        check(vk_.EnumeratePhysicalDevices(inst_, &n, nullptr), "vkEnumeratePhysicalDevices(count)");
        std::vector<VkPhysicalDevice> v(n);
        VkResult r = vk_.EnumeratePhysicalDevices(inst_, &n, v.data());
        if (r == VK_INCOMPLETE && attempt < 3) continue;
        check(r, "vkEnumeratePhysicalDevices", true);  // still incomplete: the ones written are valid
        v.resize(n);
        return v;
    }
}

const Instance& instance() {
    static std::mutex m;
    // Never destroyed, not even at exit: compute's devices live on it and are left, like the
    // instance, for the driver to reclaim when the process ends (destroying the instance under
    // them is invalid, and crashed under the validation layer).
    static Instance* inst = nullptr;
    std::lock_guard<std::mutex> lock(m);
    if (!inst) {
        const char* v = std::getenv("BANKML_GPU_VALIDATION");
        inst = new Instance(v && *v && std::strcmp(v, "0") != 0);
    }
    return *inst;
}

static std::string cstr(const char* s, size_t max) { return std::string(s, strnlen(s, max)); }

Kind kind_of(VkPhysicalDeviceType t, const std::string& name) {
    // Software renderers are recognised by name too: a driver that reports one as a GPU must not
    // be mistaken for a card.
    for (const char* sw : {"llvmpipe", "lavapipe", "SwiftShader", "softpipe"})
        if (name.find(sw) != std::string::npos) return Kind::Cpu;
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return Kind::Integrated;
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return Kind::Discrete;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return Kind::Virtual;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return Kind::Cpu;
    default: return Kind::Other;
    }
}

static std::vector<VkExtensionProperties> device_extensions(const Vk& vk, VkPhysicalDevice pd, Device& d) {
    uint32_t n = 0;
    VkResult r = vk.EnumerateDeviceExtensionProperties(pd, nullptr, &n, nullptr);
    if (r != VK_SUCCESS) {
        d.notes.push_back("vkEnumerateDeviceExtensionProperties failed: " + result_name(r));
        return {};
    }
    std::vector<VkExtensionProperties> v(n);
    r = vk.EnumerateDeviceExtensionProperties(pd, nullptr, &n, v.data());
    if (r != VK_SUCCESS && r != VK_INCOMPLETE) {
        d.notes.push_back("vkEnumerateDeviceExtensionProperties failed: " + result_name(r));
        return {};
    }
    v.resize(n);
    return v;
}

// Driver name and PCI address: both need vkGetPhysicalDeviceProperties2 and a chained struct the
// device must support, so each is read only when the device says it has it.
static void read_extended(const Instance& inst, VkPhysicalDevice pd, Device& d) {
    const Vk& vk = inst.vk();
    if (!vk.GetPhysicalDeviceProperties2 || inst.api_version() < VK_API_VERSION_1_1 || d.api_version < VK_API_VERSION_1_1)
        return;
    auto exts = device_extensions(vk, pd, d);
    bool has_driver = d.api_version >= VK_API_VERSION_1_2 || has_extension(exts, VK_KHR_DRIVER_PROPERTIES_EXTENSION_NAME);
    bool has_pci = has_extension(exts, VK_EXT_PCI_BUS_INFO_EXTENSION_NAME);
    VkPhysicalDeviceDriverProperties drv{};
    drv.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES;
    VkPhysicalDevicePCIBusInfoPropertiesEXT pci{};
    pci.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PCI_BUS_INFO_PROPERTIES_EXT;
    VkPhysicalDeviceProperties2 p2{};
    p2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
    void** next = &p2.pNext;
    if (has_driver) {
        *next = &drv;
        next = &drv.pNext;
    }
    if (has_pci) *next = &pci;
    if (!has_driver && !has_pci) return;
    vk.GetPhysicalDeviceProperties2(pd, &p2);
    if (has_driver) {
        std::string name = cstr(drv.driverName, VK_MAX_DRIVER_NAME_SIZE);
        std::string info = cstr(drv.driverInfo, VK_MAX_DRIVER_INFO_SIZE);
        d.driver = info.empty() ? name : name.empty() ? info : name + " " + info;
    }
    if (has_pci) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.%x", pci.pciDomain & 0xffff, pci.pciBus & 0xff,
                      pci.pciDevice & 0x1f, pci.pciFunction & 0x7);
        d.pci_address = buf;
    }
}

Device describe(const Instance& inst, VkPhysicalDevice pd, uint32_t index) {
    const Vk& vk = inst.vk();
    Device d;
    d.backend = "vulkan";
    d.backend_index = index;
    d.id = std::to_string(index);

    VkPhysicalDeviceProperties p{};
    vk.GetPhysicalDeviceProperties(pd, &p);
    d.name = cstr(p.deviceName, VK_MAX_PHYSICAL_DEVICE_NAME_SIZE);
    d.vendor_id = p.vendorID;
    d.device_id = p.deviceID;
    d.api_version = p.apiVersion;
    d.kind = kind_of(p.deviceType, d.name);

    VkPhysicalDeviceMemoryProperties mp{};
    vk.GetPhysicalDeviceMemoryProperties(pd, &mp);
    uint32_t heaps = mp.memoryHeapCount > VK_MAX_MEMORY_HEAPS ? VK_MAX_MEMORY_HEAPS : mp.memoryHeapCount;
    uint32_t types = mp.memoryTypeCount > VK_MAX_MEMORY_TYPES ? VK_MAX_MEMORY_TYPES : mp.memoryTypeCount;
    for (uint32_t h = 0; h < heaps; h++) {
        Heap hp;
        hp.bytes = mp.memoryHeaps[h].size;
        hp.device_local = (mp.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) != 0;
        for (uint32_t t = 0; t < types; t++)
            if (mp.memoryTypes[t].heapIndex == h && (mp.memoryTypes[t].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT))
                hp.host_visible = true;
        if (hp.device_local) d.device_local_bytes += hp.bytes;
        d.heaps.push_back(hp);
    }
    const VkMemoryPropertyFlags both = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT;
    for (uint32_t t = 0; t < types; t++) {
        if ((mp.memoryTypes[t].propertyFlags & both) != both) continue;
        uint32_t h = mp.memoryTypes[t].heapIndex;
        if (h >= heaps) continue;
        d.host_visible_device_local = true;
        if (mp.memoryHeaps[h].size > d.host_visible_device_local_bytes)
            d.host_visible_device_local_bytes = mp.memoryHeaps[h].size;
    }

    uint32_t nq = 0;
    vk.GetPhysicalDeviceQueueFamilyProperties(pd, &nq, nullptr);
    std::vector<VkQueueFamilyProperties> qf(nq);
    vk.GetPhysicalDeviceQueueFamilyProperties(pd, &nq, qf.data());
    qf.resize(nq);
    for (const auto& q : qf)
        if (q.queueFlags & VK_QUEUE_COMPUTE_BIT) d.compute_queues += q.queueCount;

    read_extended(inst, pd, d);
    return d;
}

std::vector<Device> devices() {
    Instance inst;
    std::vector<Device> out;
    auto pds = inst.physical_devices();
    for (uint32_t i = 0; i < pds.size(); i++) out.push_back(describe(inst, pds[i], i));
    return out;
}

}  // namespace bankml::gpu::vulkan
