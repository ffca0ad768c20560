// /sys/class/drm/cardN/device, read without ever throwing.
#include "gpu/sysfs.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

namespace bankml::gpu::sysfs {

namespace fs = std::filesystem;

std::string root_from_env() {
    const char* r = std::getenv("BANKML_SYSFS_ROOT");
    return r && *r ? std::string(r) : std::string("/sys");
}

// A sysfs attribute's first line, trimmed; nullopt when the file is absent or unreadable.
static std::optional<std::string> read_line(const fs::path& p) {
    std::ifstream f(p);
    if (!f) return std::nullopt;
    std::string s;
    char buf[256];
    f.read(buf, sizeof buf);  // attributes are short; a larger file is garbage and gets cut
    s.assign(buf, size_t(f.gcount()));
    if (f.bad()) return std::nullopt;
    size_t nl = s.find('\n');
    if (nl != std::string::npos) s.resize(nl);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.pop_back();
    size_t i = 0;
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) i++;
    return s.substr(i);
}

// The whole string as an unsigned number in base (0: "0x" prefix means hex), or nullopt.
static std::optional<uint64_t> parse_u64(const std::string& s, int base) {
    if (s.empty() || s[0] == '-' || s[0] == '+') return std::nullopt;
    errno = 0;
    char* end = nullptr;
    unsigned long long v = std::strtoull(s.c_str(), &end, base);
    if (errno != 0 || end == s.c_str() || *end != '\0') return std::nullopt;
    return uint64_t(v);
}

static std::optional<int64_t> parse_i64(const std::string& s) {
    if (s.empty()) return std::nullopt;
    errno = 0;
    char* end = nullptr;
    long long v = std::strtoll(s.c_str(), &end, 10);
    if (errno != 0 || end == s.c_str() || *end != '\0') return std::nullopt;
    return int64_t(v);
}

// The value of KEY=value in a uevent file.
static std::string uevent_value(const fs::path& dev, const std::string& key) {
    std::ifstream f(dev / "uevent");
    std::string line;
    for (int n = 0; n < 256 && std::getline(f, line); n++)
        if (line.compare(0, key.size() + 1, key + "=") == 0) return line.substr(key.size() + 1);
    return "";
}

static bool looks_like_pci_address(const std::string& s) {
    // dddd:bb:dd.f
    if (s.size() != 12 || s[4] != ':' || s[7] != ':' || s[10] != '.') return false;
    for (size_t i : {0, 1, 2, 3, 5, 6, 8, 9, 11})
        if (!std::isxdigit((unsigned char)s[i])) return false;
    return true;
}

// cardN with N all digits; connectors are named cardN-DP-1.
static std::optional<long> card_number(const std::string& name) {
    if (name.size() < 5 || name.compare(0, 4, "card") != 0) return std::nullopt;
    for (size_t i = 4; i < name.size(); i++)
        if (!std::isdigit((unsigned char)name[i])) return std::nullopt;
    if (name.size() > 12) return std::nullopt;
    return std::strtol(name.c_str() + 4, nullptr, 10);
}

static std::optional<Sysfs> read_card(const std::string& card, const fs::path& dev, std::vector<std::string>& notes) {
    Sysfs s;
    s.card = card;
    auto id = [&](const char* file) -> std::optional<uint32_t> {
        auto line = read_line(dev / file);
        if (!line) {
            notes.push_back("sysfs: " + card + "/device/" + file + " unreadable; card skipped");
            return std::nullopt;
        }
        auto v = parse_u64(*line, 0);
        if (!v || *v > 0xffffffffull) {
            notes.push_back("sysfs: " + card + "/device/" + file + " is not a PCI id ('" + line->substr(0, 40) +
                            "'); card skipped");
            return std::nullopt;
        }
        return uint32_t(*v);
    };
    auto vendor = id("vendor");
    if (!vendor) return std::nullopt;
    auto device = id("device");
    if (!device) return std::nullopt;
    s.vendor_id = *vendor;
    s.device_id = *device;

    std::error_code ec;
    fs::path drv = fs::read_symlink(dev / "driver", ec);
    if (!ec) s.driver = drv.filename().string();
    if (s.driver.empty()) s.driver = uevent_value(dev, "DRIVER");

    s.pci_address = uevent_value(dev, "PCI_SLOT_NAME");
    if (s.pci_address.empty()) {
        fs::path target = fs::read_symlink(dev, ec);
        if (!ec && looks_like_pci_address(target.filename().string())) s.pci_address = target.filename().string();
    }

    auto bytes = [&](const char* file) -> std::optional<uint64_t> {
        auto line = read_line(dev / file);
        if (!line) return std::nullopt;  // most drivers do not publish it
        auto v = parse_u64(*line, 10);
        if (!v) notes.push_back("sysfs: " + card + "/device/" + file + " is not a number ('" + line->substr(0, 40) + "')");
        return v;
    };
    s.vram_total = bytes("mem_info_vram_total");
    s.gtt_total = bytes("mem_info_gtt_total");

    if (auto line = read_line(dev / "numa_node")) {
        auto v = parse_i64(*line);
        if (v && *v >= -1 && *v < (1 << 20)) s.numa_node = int(*v);
        else notes.push_back("sysfs: " + card + "/device/numa_node is not a node number ('" + line->substr(0, 40) + "')");
    }
    return s;
}

std::vector<Sysfs> cards(const std::string& root, std::vector<std::string>& notes) {
    std::vector<std::pair<long, std::string>> names;
    std::error_code ec;
    fs::path drm = fs::path(root) / "class" / "drm";
    fs::directory_iterator it(drm, ec), end;
    if (ec) return {};  // no /sys/class/drm: a container or a VM, no records
    for (; it != end; it.increment(ec)) {
        if (ec) break;
        std::string name = it->path().filename().string();
        if (auto n = card_number(name)) names.push_back({*n, name});
        if (names.size() > 1024) break;
    }
    std::sort(names.begin(), names.end());
    std::vector<Sysfs> out;
    for (const auto& [n, name] : names) {
        fs::path dev = drm / name / "device";
        if (!fs::exists(dev, ec) || !fs::is_directory(dev, ec)) continue;  // no device: a virtual card
        if (auto s = read_card(name, dev, notes)) out.push_back(*s);
    }
    return out;
}

}  // namespace bankml::gpu::sysfs
