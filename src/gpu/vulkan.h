// Vulkan through dlopen: the loader (libvulkan.so.1, libvulkan.so, libvulkan.1.dylib,
// libMoltenVK.dylib; BANKML_VULKAN_LOADER=path overrides the name) is opened at run time and every
// entry point comes from vkGetInstanceProcAddr / vkGetDeviceProcAddr, so bankml links no Vulkan
// library and runs where there is none. The Vulkan headers give the types only (VK_NO_PROTOTYPES).
// Raw handles and C calls stay in vulkan.* and compute.*; everything else sees gpu::Device.
#pragma once
#ifndef VK_NO_PROTOTYPES
#define VK_NO_PROTOTYPES
#endif
#include <vulkan/vulkan.h>

#include <string>
#include <vector>

#include "gpu/gpu.h"

namespace bankml::gpu::vulkan {

// The backend's discovery (BACKENDS' "vulkan"): creates an instance, enumerates the physical
// devices, reads properties, memory heaps and types, queue families, destroys the instance.
// Throws bankml::Error naming the failing call and its VkResult
// ("vkCreateInstance failed: VK_ERROR_INCOMPATIBLE_DRIVER"), or
// "no Vulkan loader (libvulkan.so.1) on this machine".
std::vector<Device> devices();
// The kind of a physical device: its Vulkan type, except that a software renderer (llvmpipe,
// lavapipe, SwiftShader, softpipe) is Kind::Cpu whatever type its driver reports.
Kind kind_of(VkPhysicalDeviceType t, const std::string& name);

// The instance-level entry points bankml uses, each null until loaded. load_global() fills the ones
// that need no instance, load_instance() the rest (compute loads the device-level ones itself,
// through vkGetDeviceProcAddr, which skips the loader's dispatch). A missing required entry point throws
// "vkGetInstanceProcAddr(vkCreateDevice) returned null"; optional ones (noted below) stay null.
struct Vk {
    PFN_vkGetInstanceProcAddr GetInstanceProcAddr = nullptr;
    // global
    PFN_vkCreateInstance CreateInstance = nullptr;
    PFN_vkEnumerateInstanceVersion EnumerateInstanceVersion = nullptr;  // optional: null on a 1.0 loader
    PFN_vkEnumerateInstanceExtensionProperties EnumerateInstanceExtensionProperties = nullptr;
    // instance
    PFN_vkDestroyInstance DestroyInstance = nullptr;
    PFN_vkEnumeratePhysicalDevices EnumeratePhysicalDevices = nullptr;
    PFN_vkGetPhysicalDeviceProperties GetPhysicalDeviceProperties = nullptr;
    PFN_vkGetPhysicalDeviceProperties2 GetPhysicalDeviceProperties2 = nullptr;  // optional (1.1)
    PFN_vkGetPhysicalDeviceFeatures GetPhysicalDeviceFeatures = nullptr;
    PFN_vkGetPhysicalDeviceFeatures2 GetPhysicalDeviceFeatures2 = nullptr;  // optional (1.1)
    PFN_vkGetPhysicalDeviceMemoryProperties GetPhysicalDeviceMemoryProperties = nullptr;
    PFN_vkGetPhysicalDeviceQueueFamilyProperties GetPhysicalDeviceQueueFamilyProperties = nullptr;
    PFN_vkEnumerateDeviceExtensionProperties EnumerateDeviceExtensionProperties = nullptr;
    PFN_vkCreateDevice CreateDevice = nullptr;
    PFN_vkGetDeviceProcAddr GetDeviceProcAddr = nullptr;
    PFN_vkCreateDebugUtilsMessengerEXT CreateDebugUtilsMessengerEXT = nullptr;    // optional (validation)
    PFN_vkDestroyDebugUtilsMessengerEXT DestroyDebugUtilsMessengerEXT = nullptr;  // optional (validation)

    void load_global(PFN_vkGetInstanceProcAddr gipa);
    void load_instance(VkInstance instance);
};

// The loader: vkGetInstanceProcAddr from the first library that opens. The library stays loaded
// for the life of the process (drivers keep threads and atexit handlers in it). Throws
// "no Vulkan loader (libvulkan.so.1) on this machine" (or names BANKML_VULKAN_LOADER's path).
PFN_vkGetInstanceProcAddr open_loader();
// The library names tried, in order (BANKML_VULKAN_LOADER alone when set).
std::vector<std::string> loader_names();

// An instance with its entry points. Owned: the destructor destroys the instance.
class Instance {
public:
    // Creates an instance for the newest API version the loader offers, up to 1.3, with
    // portability enumeration where the loader has it (MoltenVK). Throws on failure.
    // validation: also enable VK_LAYER_KHRONOS_validation with a VK_EXT_debug_utils messenger
    // that collects warnings and errors (validation_messages()); where the layer is missing the
    // instance is made without it and validation() is false.
    explicit Instance(bool validation = false);
    ~Instance();
    Instance(const Instance&) = delete;
    Instance& operator=(const Instance&) = delete;

    const Vk& vk() const { return vk_; }
    VkInstance handle() const { return inst_; }
    uint32_t api_version() const { return api_; }  // the version the instance was created for
    bool validation() const { return messenger_ != VK_NULL_HANDLE; }
    // vkEnumeratePhysicalDevices, in the driver's order (Device::backend_index indexes this).
    std::vector<VkPhysicalDevice> physical_devices() const;

private:
    Vk vk_;
    VkInstance inst_ = VK_NULL_HANDLE;
    uint32_t api_ = VK_API_VERSION_1_0;
    VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
};

// The long-lived instance compute uses: created on first call, never destroyed (it lives for the
// rest of the process), with validation when BANKML_GPU_VALIDATION is set (and not "0").
// Thread-safe; a failure is thrown each call (and retried).
const Instance& instance();

// The validation layer's warnings and errors so far, from every Instance made with validation.
std::vector<std::string> validation_messages();

// "VK_ERROR_DEVICE_LOST", or "VkResult(-1000)" for a code this file does not name.
std::string result_name(VkResult r);
// Throws bankml::Error("CALL failed: VK_...") unless r is VK_SUCCESS (VK_INCOMPLETE too when
// allow_incomplete). call names the call and its arguments ("vkCreateDevice(llvmpipe)").
void check(VkResult r, const std::string& call, bool allow_incomplete = false);

// The Device a physical device describes (backend "vulkan", backend_index = index). The
// instance must be the one pd came from.
Device describe(const Instance& inst, VkPhysicalDevice pd, uint32_t index);

}  // namespace bankml::gpu::vulkan
