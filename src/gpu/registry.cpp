// The registry: the backend tables, discovery with sysfs attached, BANKML_GPU selection and the
// `bankml gpu` report.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <utility>

#include "core/cli.h"
#include "core/error.h"
#include "gpu/gpu.h"
#include "gpu/hf.h"
#include "gpu/sysfs.h"
#include "gpu/vulkan.h"

namespace bankml::gpu {

const std::vector<Backend> BACKENDS = {
    {"vulkan", &vulkan::devices},
};

// Rented hardware, listed only with --remote: never selected, started or paid for.
const std::vector<Backend> REMOTE_BACKENDS = {
    {"huggingface", &hf::devices},
};

const char* kind_name(Kind k) {
    switch (k) {
    case Kind::Integrated: return "Integrated";
    case Kind::Discrete: return "Discrete";
    case Kind::Virtual: return "Virtual";
    case Kind::Cpu: return "Cpu";
    case Kind::Remote: return "Remote";
    case Kind::Other: return "Other";
    }
    return "Other";
}

bool Device::usable() const {
    return (kind == Kind::Integrated || kind == Kind::Discrete) && compute_queues > 0;
}

std::string Device::not_usable_because() const {
    switch (kind) {
    case Kind::Cpu:
        return "software renderer: it runs on the CPU bankml already uses (BANKML_GPU_ALLOW_SOFTWARE=1 "
               "lets tests select it)";
    case Kind::Remote: return "rented hardware: listed, never selected (it costs money)";
    case Kind::Virtual: return "virtual GPU: only integrated and discrete cards are used";
    case Kind::Other: return "not a GPU bankml knows (device type Other)";
    case Kind::Integrated:
    case Kind::Discrete: break;
    }
    if (compute_queues == 0) return "no compute queue";
    return "";
}

const char* vendor_name(uint32_t v) {
    switch (v) {
    case 0x1002: return "AMD";
    case 0x1022: return "AMD";
    case 0x10de: return "NVIDIA";
    case 0x8086: return "Intel";
    case 0x13b5: return "Arm";
    case 0x5143: return "Qualcomm";
    case 0x106b: return "Apple";
    case 0x1010: return "Imagination";
    case 0x14e4: return "Broadcom";
    case 0x1af4: return "virtio";
    case 0x15ad: return "VMware";
    case 0x1414: return "Microsoft";
    case 0x10005: return "Mesa";  // VK_VENDOR_ID_MESA: software drivers without a PCI vendor
    default: return "";
    }
}

std::string api_version_string(uint32_t v) {
    // VK_API_VERSION_MAJOR/MINOR/PATCH, without pulling the Vulkan headers into the registry.
    return std::to_string((v >> 22) & 0x7f) + "." + std::to_string((v >> 12) & 0x3ff) + "." +
           std::to_string(v & 0xfff);
}

// Attaches each sysfs card to the device the driver says sits at its PCI address, then the rest by
// vendor and device id in order (eight identical cards pair off one to one, in PCI order).
static void attach_sysfs(std::vector<Device>& devs, std::vector<Sysfs> cards, std::vector<std::string>& notes) {
    std::vector<bool> used(cards.size(), false);
    for (auto& d : devs) {
        if (d.pci_address.empty()) continue;
        for (size_t i = 0; i < cards.size(); i++)
            if (!used[i] && cards[i].pci_address == d.pci_address) {
                d.sysfs = cards[i];
                used[i] = true;
                break;
            }
    }
    for (auto& d : devs) {
        if (d.sysfs || d.kind == Kind::Remote || d.kind == Kind::Cpu || d.vendor_id == 0) continue;
        for (size_t i = 0; i < cards.size(); i++)
            if (!used[i] && cards[i].vendor_id == d.vendor_id && cards[i].device_id == d.device_id) {
                d.sysfs = cards[i];
                used[i] = true;
                break;
            }
    }
    for (size_t i = 0; i < cards.size(); i++) {
        if (used[i]) continue;
        char ids[32];
        std::snprintf(ids, sizeof ids, "%04x:%04x", cards[i].vendor_id, cards[i].device_id);
        notes.push_back("sysfs: " + cards[i].card + " (" + ids +
                        (cards[i].driver.empty() ? std::string(", no driver") : ", " + cards[i].driver) +
                        ") has no device in any backend");
    }
}

static void ask(const Backend& b, std::vector<Device>& devs, std::vector<std::string>& notes) {
    try {
        std::vector<Device> found = b.discover();
        if (found.empty()) notes.push_back(std::string(b.name) + ": no devices");
        for (auto& d : found) {
            d.backend = b.name;  // the table's name is the one the report and BANKML_GPU users see
            devs.push_back(std::move(d));
        }
    } catch (const std::exception& e) {
        // A backend that fails is a note: bankml carries on with the CPU and the other backends.
        notes.push_back(std::string(b.name) + ": " + e.what());
    }
}

Discovery discover_with(const std::vector<Backend>& backends, const std::string& sysfs_root) {
    Discovery d;
    for (const auto& b : backends) ask(b, d.devices, d.notes);
    attach_sysfs(d.devices, sysfs::cards(sysfs_root, d.notes), d.notes);
    return d;
}

Discovery discover(bool remote) {
    Discovery d = discover_with(BACKENDS, sysfs::root_from_env());
    if (remote)
        for (const auto& b : REMOTE_BACKENDS) ask(b, d.devices, d.notes);
    return d;
}

static bool selectable(const Device& d, bool allow_software) {
    if (d.usable()) return true;
    return allow_software && d.kind == Kind::Cpu && d.compute_queues > 0;
}

// Discrete, then integrated, then (when allowed) software; within a kind the most device-local
// memory first; ties keep discovery order.
static int kind_rank(Kind k) { return k == Kind::Discrete ? 0 : k == Kind::Integrated ? 1 : 2; }

static std::string lower_trimmed(std::string s) {
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.pop_back();
    size_t i = 0;
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) i++;
    s.erase(0, i);
    for (auto& c : s) c = char(std::tolower((unsigned char)c));
    return s;
}

Selection select(const std::vector<Device>& devs, const std::optional<std::string>& bankml_gpu, bool allow_software) {
    Selection sel;
    std::vector<size_t> cand;
    std::string v = bankml_gpu ? lower_trimmed(*bankml_gpu) : "";
    if (v == "off" || v == "none" || v == "cpu") {
        sel.off = true;
        return sel;
    }
    if (v.empty()) {
        for (size_t i = 0; i < devs.size(); i++)
            if (selectable(devs[i], allow_software)) cand.push_back(i);
    } else {
        auto list = cli::parse_int_list(v);
        if (!list) {
            sel.notes.push_back("BANKML_GPU='" + *bankml_gpu +
                                "' is neither off/none/cpu nor a comma list of device indices; no GPU selected");
            return sel;
        }
        for (int64_t x : *list) {
            if (x < 0 || size_t(x) >= devs.size()) {
                sel.notes.push_back("BANKML_GPU: no device " + std::to_string(x) + " (there are " +
                                    std::to_string(devs.size()) + ")");
                continue;
            }
            size_t i = size_t(x);
            if (std::find(cand.begin(), cand.end(), i) != cand.end()) continue;
            if (!selectable(devs[i], allow_software)) {
                sel.notes.push_back("BANKML_GPU: device " + std::to_string(i) + " (" + devs[i].name +
                                    ") is not usable: " + devs[i].not_usable_because());
                continue;
            }
            cand.push_back(i);
        }
    }
    std::stable_sort(cand.begin(), cand.end(), [&](size_t a, size_t b) {
        int ra = kind_rank(devs[a].kind), rb = kind_rank(devs[b].kind);
        if (ra != rb) return ra < rb;
        return devs[a].device_local_bytes > devs[b].device_local_bytes;
    });
    sel.indices = cand;
    return sel;
}

bool allow_software_from_env() {
    const char* s = std::getenv("BANKML_GPU_ALLOW_SOFTWARE");
    return s && std::string(s) == "1";
}

Selection select_from_env(const std::vector<Device>& devs) {
    const char* g = std::getenv("BANKML_GPU");
    return select(devs, g ? std::optional<std::string>(g) : std::nullopt, allow_software_from_env());
}

std::vector<Device> selected(const std::vector<Device>& devs) {
    std::vector<Device> out;
    for (size_t i : select_from_env(devs).indices) out.push_back(devs[i]);
    return out;
}

}  // namespace bankml::gpu
