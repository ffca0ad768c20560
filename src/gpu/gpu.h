// The GPU registry: every video card a backend can find, described as the driver and the kernel see
// it, which of them bankml would use (BANKML_GPU, discrete first), and the `bankml gpu` report.
// A backend is one discovery function in BACKENDS; nothing is linked at build time (the Vulkan
// backend dlopens its loader), so a machine without a driver simply has no devices from it.
// This file knows no model and no kernel; raw pointers and C calls stay in vulkan.* and compute.*.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace bankml::gpu {

// What kind of device a backend reports. Only Integrated and Discrete cards are ever used:
// Cpu is a software renderer (llvmpipe/lavapipe, SwiftShader) that runs on the very CPU bankml
// already uses, Remote is rented hardware (listed, never started: it costs money).
enum class Kind { Integrated, Discrete, Virtual, Cpu, Remote, Other };

// The name the report uses ("Integrated", "Discrete", "Virtual", "Cpu", "Remote", "Other").
const char* kind_name(Kind k);

// The kernel's view of a card, from /sys/class/drm/cardN/device (see sysfs.h).
struct Sysfs {
    std::string card;                      // "card0"
    uint32_t vendor_id = 0, device_id = 0; // PCI ids from device/vendor, device/device
    std::string driver;                    // the `driver` link's name: "amdgpu", "i915", "nvidia"
    std::optional<uint64_t> vram_total;    // mem_info_vram_total, where the driver publishes it
    std::optional<uint64_t> gtt_total;     // mem_info_gtt_total, likewise
    std::string pci_address;               // "0000:03:00.0"; empty when unknown
    std::optional<int> numa_node;          // device/numa_node; -1 (no affinity) is kept as -1
};

// One memory heap as the backend reports it.
struct Heap {
    uint64_t bytes = 0;
    bool device_local = false;
    bool host_visible = false;  // some memory type of this heap can be mapped by the CPU
};

// One device, local or remote, as one backend sees it.
struct Device {
    std::string backend;       // "vulkan", "huggingface": the BACKENDS / REMOTE_BACKENDS name
    // The backend's own handle: for Vulkan the physical device's position in
    // vkEnumeratePhysicalDevices order (compute opens it by backend_index), for a rented
    // card its flavor ("h200x8").
    std::string id;
    uint32_t backend_index = 0;
    std::string name;
    uint32_t vendor_id = 0, device_id = 0;
    Kind kind = Kind::Other;
    uint32_t api_version = 0;  // Vulkan's packed VK_MAKE_API_VERSION; 0 when not applicable
    std::string driver;        // the driver's own name and version where reported ("NVIDIA 550.54")
    // Sum of the device-local heaps: the memory the device addresses fastest.
    uint64_t device_local_bytes = 0;
    // Some device-local memory is also host-visible (integrated memory, resizable BAR): weights
    // can be written in place, without a staging copy. The largest such heap's size beside it.
    bool host_visible_device_local = false;
    uint64_t host_visible_device_local_bytes = 0;
    std::vector<Heap> heaps;
    uint32_t compute_queues = 0;  // queues, over all families, that can run compute
    std::string pci_address;      // from the driver (VK_EXT_pci_bus_info) where it says; else empty
    // Rented hardware: cards in one flavor and its price (absent when the API gives none).
    uint32_t count = 1;
    std::optional<double> usd_per_hour;
    std::optional<Sysfs> sysfs;
    std::vector<std::string> notes;  // free-form remarks of the backend about this device

    // True only for an Integrated or Discrete card with at least one compute queue.
    bool usable() const;
    // Why usable() is false, one phrase ("software renderer ..."); empty when usable.
    std::string not_usable_because() const;
};

// A backend's discovery: its devices, or a bankml::Error whose message says why it found none
// ("no Vulkan loader (libvulkan.so.1) on this machine"). It must never crash the process.
using Discover = std::vector<Device> (*)();
struct Backend {
    const char* name;
    Discover discover;
};
// Local backends, asked by discover(). A new backend is a new file and one line in registry.cpp.
extern const std::vector<Backend> BACKENDS;
// Rented hardware, asked only by discover(true) / `bankml gpu --remote`; never selected.
extern const std::vector<Backend> REMOTE_BACKENDS;

struct Discovery {
    std::vector<Device> devices;     // in report order: the index here is the BANKML_GPU index
    std::vector<std::string> notes;  // "vulkan: ..." why a backend found nothing, sysfs remarks
};

// Asks every backend (and, with remote, every remote backend), attaches each card's sysfs record
// (matched by PCI address where the driver gives it, else by vendor and device id in order).
Discovery discover(bool remote = false);
// The same with explicit backends and sysfs root ("/sys" stands for the real one), for tests.
Discovery discover_with(const std::vector<Backend>& backends, const std::string& sysfs_root);

// The outcome of BANKML_GPU on a device list: indices into the list, in order of use.
struct Selection {
    std::vector<size_t> indices;
    std::vector<std::string> notes;  // a bad value, an index out of range or not usable
    bool off = false;                // BANKML_GPU=off/none/cpu
};

// Applies a BANKML_GPU value (nullopt: unset) to devs. Unset or empty: every usable device.
// "off", "none", "cpu": nothing. "0,2": those indices. Anything else: a note and nothing selected
// (the CPU gives the same bits, so a value bankml cannot read never turns a card on).
// Only usable devices are kept (plus software renderers when allow_software), never a Remote one,
// ordered discrete first, then integrated, then by device-local memory, largest first.
Selection select(const std::vector<Device>& devs, const std::optional<std::string>& bankml_gpu,
                 bool allow_software);
// select() with BANKML_GPU and BANKML_GPU_ALLOW_SOFTWARE from the environment.
Selection select_from_env(const std::vector<Device>& devs);
// The selected devices themselves, in order of use.
std::vector<Device> selected(const std::vector<Device>& devs);

// BANKML_GPU_ALLOW_SOFTWARE=1: a software renderer may be selected (for CI on lavapipe only).
bool allow_software_from_env();

// The `bankml gpu` report as JSON: devices, selected, notes, kernels (docs/modules/gpu.md names
// every field). With remote, rented hardware is listed too.
std::string report_json(bool remote);
// The same for a given discovery (tests build their own).
std::string report_json(const Discovery& d);

// A PCI vendor's common name ("AMD", "NVIDIA", "Intel", "Mesa" ...), or empty.
const char* vendor_name(uint32_t vendor_id);
// "1.3.239" from Vulkan's packed version.
std::string api_version_string(uint32_t v);

}  // namespace bankml::gpu
