// The GPU registry: selection on constructed device lists, BANKML_GPU in every form, discovery that
// never crashes (no loader, a loader without a driver, lavapipe), sysfs from fixture trees, and the
// `bankml gpu` report.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <new>
#include <stdexcept>

#include "core/error.h"
#include "core/json.h"
#include "gpu/gpu.h"
#include "gpu/sysfs.h"
#include "gpu/vulkan.h"
#include "test.h"

using namespace bankml;
using gpu::Device;
using gpu::Kind;

static Device dev(const std::string& name, Kind k, uint64_t local, uint32_t queues = 1) {
    Device d;
    d.backend = "test";
    d.name = name;
    d.kind = k;
    d.device_local_bytes = local;
    d.compute_queues = queues;
    return d;
}

static const uint64_t GiB = 1ull << 30;

// 0 llvmpipe, 1 an APU, 2 a small discrete card, 3 a big one, 4 a virtual GPU, 5 a rented H200,
// 6 a discrete card without a compute queue, 7 an Other.
static std::vector<Device> zoo() {
    return {dev("llvmpipe (LLVM 15.0.6, 256 bits)", Kind::Cpu, 2 * GiB), dev("AMD Radeon Vega 3", Kind::Integrated, 2 * GiB),
            dev("small discrete", Kind::Discrete, 8 * GiB),        dev("big discrete", Kind::Discrete, 24 * GiB),
            dev("virtio-gpu", Kind::Virtual, 1 * GiB),             dev("h200x8", Kind::Remote, 141 * GiB),
            dev("no compute", Kind::Discrete, 64 * GiB, 0),        dev("odd", Kind::Other, 4 * GiB)};
}

using Idx = std::vector<size_t>;

TEST(software_renderers_are_never_selected_and_discrete_cards_come_first) {
    auto z = zoo();
    CHECK(!z[0].usable());
    CHECK(z[0].not_usable_because().find("software renderer") != std::string::npos);
    CHECK(z[1].usable());
    CHECK(z[3].usable());
    CHECK(!z[4].usable());
    CHECK(!z[5].usable());
    CHECK(!z[6].usable());
    CHECK_EQ(z[6].not_usable_because(), "no compute queue");
    CHECK(!z[7].usable());

    // Discrete first, largest device-local memory first; then the integrated card; nothing else.
    auto s = gpu::select(z, std::nullopt, false);
    CHECK(s.indices == (Idx{3, 2, 1}));
    CHECK(s.notes.empty());
    CHECK(!s.off);
    // Naming the software renderer, the rented card or the card without compute selects nothing.
    auto named = gpu::select(z, "0,5,6", false);
    CHECK(named.indices.empty());
    CHECK_EQ(named.notes.size(), 3u);
    // Software allowed (CI on lavapipe): after every real card, and a rented card still never.
    auto sw = gpu::select(z, std::nullopt, true);
    CHECK(sw.indices == (Idx{3, 2, 1, 0}));
    CHECK(gpu::select(z, "5", true).indices.empty());
    CHECK(gpu::select(z, "0", true).indices == (Idx{0}));
    // Equal kinds and memory keep discovery order.
    std::vector<Device> twins = {dev("a", Kind::Discrete, 80 * GiB), dev("b", Kind::Discrete, 80 * GiB),
                                 dev("c", Kind::Discrete, 141 * GiB)};
    CHECK(gpu::select(twins, std::nullopt, false).indices == (Idx{2, 0, 1}));
    CHECK(gpu::select({}, std::nullopt, false).indices.empty());
}

TEST(bankml_gpu_parsing_every_form_and_bad_values) {
    auto z = zoo();
    for (const char* off : {"off", "none", "cpu", "OFF", " Cpu ", "None"}) {
        auto s = gpu::select(z, std::string(off), false);
        CHECK(s.off);
        CHECK(s.indices.empty());
        CHECK(s.notes.empty());
    }
    CHECK(gpu::select(z, std::string(""), false).indices == (Idx{3, 2, 1}));  // empty: as unset
    CHECK(gpu::select(z, std::string("1"), false).indices == (Idx{1}));
    // Picked devices are still used discrete first.
    CHECK(gpu::select(z, std::string("1,2"), false).indices == (Idx{2, 1}));
    CHECK(gpu::select(z, std::string(" 2 , 3 "), false).indices == (Idx{3, 2}));
    CHECK(gpu::select(z, std::string("3,3"), false).indices == (Idx{3}));

    auto far = gpu::select(z, std::string("9,1"), false);
    CHECK(far.indices == (Idx{1}));
    REQUIRE_EQ(far.notes.size(), 1u);
    CHECK(far.notes[0].find("no device 9") != std::string::npos);
    auto neg = gpu::select(z, std::string("-1"), false);
    CHECK(neg.indices.empty());
    CHECK_EQ(neg.notes.size(), 1u);
    auto sw = gpu::select(z, std::string("0"), false);
    REQUIRE_EQ(sw.notes.size(), 1u);
    CHECK(sw.notes[0].find("llvmpipe") != std::string::npos);
    CHECK(sw.notes[0].find("software renderer") != std::string::npos);

    // A value bankml cannot read never turns a card on: a note, nothing selected, not "off".
    for (const char* bad : {"abc", "1,,2", "1.5", "0x1", "1,a", ",", "of", "99999999999999999999999"}) {
        auto s = gpu::select(z, std::string(bad), false);
        CHECK(s.indices.empty());
        CHECK(!s.off);
        REQUIRE_EQ(s.notes.size(), 1u);
        CHECK(s.notes[0].find(std::string("'") + bad + "'") != std::string::npos);
    }
}

// Sets an environment variable for one scope and puts the old value back.
struct EnvVar {
    std::string name;
    std::optional<std::string> old;
    EnvVar(const std::string& n, const char* v) : name(n) {
        if (const char* o = std::getenv(n.c_str())) old = o;
        if (v) setenv(n.c_str(), v, 1); else unsetenv(n.c_str());
    }
    ~EnvVar() {
        if (old) setenv(name.c_str(), old->c_str(), 1); else unsetenv(name.c_str());
    }
};

TEST(selected_reads_bankml_gpu_and_allow_software_from_the_environment) {
    auto z = zoo();
    {
        EnvVar g("BANKML_GPU", nullptr), a("BANKML_GPU_ALLOW_SOFTWARE", nullptr);
        auto s = gpu::selected(z);
        REQUIRE_EQ(s.size(), 3u);
        CHECK_EQ(s[0].name, "big discrete");
        CHECK(!gpu::allow_software_from_env());
    }
    {
        EnvVar g("BANKML_GPU", "off"), a("BANKML_GPU_ALLOW_SOFTWARE", "1");
        CHECK(gpu::selected(z).empty());
        CHECK(gpu::allow_software_from_env());
    }
    {
        EnvVar g("BANKML_GPU", "0"), a("BANKML_GPU_ALLOW_SOFTWARE", "yes");  // only "1" turns it on
        CHECK(gpu::selected(z).empty());
    }
}

static std::vector<Device> throws_error() { throw Error("vkCreateInstance failed: VK_ERROR_INCOMPATIBLE_DRIVER"); }
static std::vector<Device> throws_bad_alloc() { throw std::bad_alloc(); }
static std::vector<Device> finds_nothing() { return {}; }
static std::vector<Device> finds_one() { return {dev("a card", Kind::Discrete, 8 * GiB)}; }

static bool has_note(const std::vector<std::string>& notes, const std::string& sub) {
    for (const auto& n : notes)
        if (n.find(sub) != std::string::npos) return true;
    return false;
}

// Runs `bankml gpu` with env prepended; exit 0 and one JSON report on stdout whatever happens.
struct Report {
    bt::Proc p;
    json::Value v;
};
static Report bankml_gpu(const std::string& env) {
    Report r{bt::run_cmd(env + " " + bt::bankml_bin() + " gpu"), {}};
    CHECK_EQ(r.p.code, 0);
    json::ParseFailure why;
    auto v = json::try_parse(r.p.out, &why);
    if (!v) bt::fail(__FILE__, __LINE__, "bankml gpu (" + env + ") printed no JSON: " + why.message);
    else r.v = *v;
    CHECK(r.v["kernels"].is_object());
    CHECK(r.v["devices"].is_array());
    return r;
}

static bool note_has(const json::Value& notes, const std::string& sub) {
    for (const auto& n : notes.as_array())
        if (n.string_or("").find(sub) != std::string::npos) return true;
    return false;
}

static std::string lavapipe_icd() {
    for (const char* dir : {"/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d", "/usr/local/share/vulkan/icd.d"}) {
        std::error_code ec;
        for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
            if (it->path().filename().string().rfind("lvp_icd", 0) == 0) return it->path().string();
    }
    return "";
}

TEST(discovery_never_panics) {
    // A backend that fails, whatever it throws, becomes a note; the others still count.
    auto d = gpu::discover_with({{"broken", throws_error}, {"oom", throws_bad_alloc}, {"empty", finds_nothing}, {"fine", finds_one}},
                                "/nonexistent-sysfs");
    REQUIRE_EQ(d.devices.size(), 1u);
    CHECK_EQ(d.devices[0].backend, "fine");
    CHECK(has_note(d.notes, "broken: vkCreateInstance failed: VK_ERROR_INCOMPATIBLE_DRIVER"));
    CHECK(has_note(d.notes, "oom: "));
    CHECK(has_note(d.notes, "empty: no devices"));

    {
        EnvVar l("BANKML_VULKAN_LOADER", nullptr);
        CHECK_EQ(gpu::vulkan::loader_names().at(0), "libvulkan.so.1");
    }
    {
        EnvVar l("BANKML_VULKAN_LOADER", "/nonexistent/libvulkan.so.1");
        CHECK_THROWS(gpu::vulkan::devices(), "no Vulkan loader (/nonexistent/libvulkan.so.1) on this machine");
        auto dd = gpu::discover();
        CHECK(dd.devices.empty());
        CHECK(has_note(dd.notes, "vulkan: no Vulkan loader"));
    }
    // No loader, a library that is not a loader, a loader without any driver: notes, exit 0.
    auto none = bankml_gpu("BANKML_VULKAN_LOADER=/nonexistent");
    CHECK(note_has(none.v["notes"], "vulkan: no Vulkan loader (/nonexistent) on this machine"));
    CHECK_EQ(none.v["devices"].size(), 0u);
    CHECK_EQ(none.v["kernels"]["Q1_0"]["runs_on"].string_or(""), "cpu");
    auto libc = bankml_gpu("BANKML_VULKAN_LOADER=libc.so.6");
    CHECK(note_has(libc.v["notes"], "has no vkGetInstanceProcAddr"));
    auto nodrv = bankml_gpu("VK_ICD_FILENAMES=/nonexistent.json VK_DRIVER_FILES=/nonexistent.json");
    if (!note_has(nodrv.v["notes"], "no Vulkan loader")) {
        // The loader either refuses the instance or finds no device; either way it is said.
        CHECK(note_has(nodrv.v["notes"], "vkCreateInstance(api ") || note_has(nodrv.v["notes"], "vulkan: no devices"));
        if (note_has(nodrv.v["notes"], "VK_ERROR_INCOMPATIBLE_DRIVER"))
            CHECK(note_has(nodrv.v["notes"], "VK_LOADER_DEBUG=error,warn shows why"));
        CHECK_EQ(nodrv.v["devices"].size(), 0u);
    }
    // lavapipe: listed as Cpu, not usable, never selected unless allowed.
    std::string icd = lavapipe_icd();
    if (icd.empty()) SKIP("gpu", "lavapipe (mesa-vulkan-drivers) is not installed");
    std::string env = "VK_ICD_FILENAMES=" + icd + " VK_DRIVER_FILES=" + icd;
    auto lvp = bankml_gpu(env);
    REQUIRE_EQ(lvp.v["devices"].size(), 1u);
    const json::Value& llvmpipe = lvp.v["devices"][0];
    CHECK(llvmpipe["name"].string_or("").find("llvmpipe") == 0);
    CHECK_EQ(llvmpipe["kind"].string_or(""), "Cpu");
    CHECK(!llvmpipe["usable"].bool_or(true));
    CHECK(llvmpipe["not_usable_because"].string_or("").find("software renderer") == 0);
    CHECK(!llvmpipe["selected"].bool_or(true));
    CHECK_EQ(lvp.v["selected"].size(), 0u);
    CHECK(!lvp.v["allow_software"].bool_or(true));
    auto allowed = bankml_gpu(env + " BANKML_GPU_ALLOW_SOFTWARE=1");
    REQUIRE_EQ(allowed.v["selected"].size(), 1u);
    CHECK_EQ(allowed.v["selected"][0].as_int(), 0);
    CHECK(allowed.v["allow_software"].bool_or(false));
    CHECK(note_has(allowed.v["notes"], "BANKML_GPU_ALLOW_SOFTWARE=1: software renderers may be selected"));
    CHECK_EQ(allowed.v["kernels"]["Q1_0"]["runs_on"].string_or(""), "gpu");
    auto off = bankml_gpu(env + " BANKML_GPU_ALLOW_SOFTWARE=1 BANKML_GPU=off");
    CHECK_EQ(off.v["selected"].size(), 0u);
    CHECK_EQ(off.v["bankml_gpu"].string_or(""), "off");
    // Khronos' validation layer, where installed, finds nothing to say about discovery.
    auto val = bankml_gpu(env + " VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation");
    CHECK(val.p.err.find("Validation") == std::string::npos);
    CHECK_EQ(val.v["devices"].size(), 1u);
}

TEST(vulkan_describes_lavapipe_in_process_and_names_vkresults) {
    CHECK_EQ(gpu::vulkan::result_name(VK_ERROR_INCOMPATIBLE_DRIVER), "VK_ERROR_INCOMPATIBLE_DRIVER");
    CHECK_EQ(gpu::vulkan::result_name(VkResult(-424242)), "VkResult(-424242)");
    CHECK_THROWS(gpu::vulkan::check(VK_ERROR_DEVICE_LOST, "vkQueueSubmit(q)"), "vkQueueSubmit(q) failed: VK_ERROR_DEVICE_LOST");
    CHECK_THROWS(gpu::vulkan::check(VK_INCOMPLETE, "vkEnumeratePhysicalDevices"), "VK_INCOMPLETE");
    gpu::vulkan::check(VK_INCOMPLETE, "vkEnumeratePhysicalDevices", true);
    std::string icd = lavapipe_icd();
    if (icd.empty()) SKIP("gpu", "lavapipe (mesa-vulkan-drivers) is not installed");
    EnvVar a("VK_ICD_FILENAMES", icd.c_str()), b("VK_DRIVER_FILES", icd.c_str()), c("BANKML_VULKAN_LOADER", nullptr);
    std::vector<Device> devs;
    try {
        devs = gpu::vulkan::devices();
    } catch (const std::exception& e) {
        SKIP("gpu", std::string("no Vulkan loader usable here: ") + e.what());
    }
    REQUIRE_EQ(devs.size(), 1u);
    const Device& d = devs[0];
    CHECK_EQ(d.backend, "vulkan");
    CHECK_EQ(d.backend_index, 0u);
    CHECK(d.kind == Kind::Cpu);
    CHECK(d.name.find("llvmpipe") != std::string::npos);
    CHECK_EQ(d.vendor_id, 0x10005u);  // VK_VENDOR_ID_MESA
    CHECK_GE(d.api_version, uint32_t(VK_API_VERSION_1_0));
    CHECK_GE(d.compute_queues, 1u);
    REQUIRE(!d.heaps.empty());
    uint64_t local = 0;
    for (const auto& h : d.heaps) local += h.device_local ? h.bytes : 0;
    CHECK_EQ(d.device_local_bytes, local);
    CHECK_GT(d.device_local_bytes, 0u);
    // lavapipe's memory is the CPU's: device-local and host-visible at once.
    CHECK(d.host_visible_device_local);
    CHECK_GT(d.host_visible_device_local_bytes, 0u);
    CHECK(!d.usable());
}

TEST(sysfs_fixture_cards_amdgpu_i915_no_device_link_and_garbage) {
    std::vector<std::string> notes;
    auto cards = gpu::sysfs::cards(bt::data_path("sysfs/mixed"), notes);
    // card0 amdgpu, card1 i915, card10 amdgpu APU with garbage; card2 has no device link, card3's
    // vendor is garbage, card0-DP-1 is a connector, renderD128 a render node.
    REQUIRE_EQ(cards.size(), 3u);
    const auto& amd = cards[0];
    CHECK_EQ(amd.card, "card0");
    CHECK_EQ(amd.vendor_id, 0x1002u);
    CHECK_EQ(amd.device_id, 0x73bfu);
    CHECK_EQ(amd.driver, "amdgpu");
    REQUIRE(amd.vram_total.has_value());
    CHECK_EQ(*amd.vram_total, 17163091968ull);
    REQUIRE(amd.gtt_total.has_value());
    CHECK_EQ(*amd.gtt_total, 33554432000ull);
    CHECK_EQ(amd.pci_address, "0000:03:00.0");
    REQUIRE(amd.numa_node.has_value());
    CHECK_EQ(*amd.numa_node, 1);

    const auto& intel = cards[1];
    CHECK_EQ(intel.card, "card1");
    CHECK_EQ(intel.vendor_id, 0x8086u);
    CHECK_EQ(intel.device_id, 0x4680u);
    CHECK_EQ(intel.driver, "i915");
    CHECK(!intel.vram_total.has_value());
    CHECK(!intel.gtt_total.has_value());
    CHECK_EQ(intel.pci_address, "0000:00:02.0");  // from the device link, there is no uevent
    REQUIRE(intel.numa_node.has_value());
    CHECK_EQ(*intel.numa_node, -1);

    const auto& apu = cards[2];
    CHECK_EQ(apu.card, "card10");  // numeric order: card10 after card3
    CHECK_EQ(apu.driver, "amdgpu");  // no driver link: uevent's DRIVER
    CHECK_EQ(apu.pci_address, "0000:04:00.0");
    CHECK(!apu.vram_total.has_value());
    CHECK(!apu.numa_node.has_value());

    CHECK(has_note(notes, "card3/device/vendor is not a PCI id ('zzz'); card skipped"));
    CHECK(has_note(notes, "card10/device/mem_info_vram_total is not a number ('lots')"));
    CHECK(has_note(notes, "card10/device/numa_node is not a node number ('banana')"));
    CHECK_EQ(notes.size(), 3u);

    std::vector<std::string> none;
    CHECK(gpu::sysfs::cards("/nonexistent-sysfs", none).empty());
    CHECK(none.empty());
    {
        EnvVar r("BANKML_SYSFS_ROOT", nullptr);
        CHECK_EQ(gpu::sysfs::root_from_env(), "/sys");
    }
}

static std::vector<Device> fixture_cards() {
    Device amd = dev("AMD Radeon RX 6900 XT", Kind::Discrete, 16 * GiB);
    amd.vendor_id = 0x1002, amd.device_id = 0x73bf;
    Device intel = dev("Intel(R) UHD Graphics 770", Kind::Integrated, 0);
    intel.vendor_id = 0x8086, intel.device_id = 0x4680;
    intel.pci_address = "0000:00:02.0";
    Device lvp = dev("llvmpipe", Kind::Cpu, GiB);
    lvp.vendor_id = 0x10005;
    return {lvp, intel, amd};
}

TEST(sysfs_records_attach_by_pci_address_then_by_ids) {
    auto d = gpu::discover_with({{"fixture", fixture_cards}}, bt::data_path("sysfs/mixed"));
    REQUIRE_EQ(d.devices.size(), 3u);
    CHECK(!d.devices[0].sysfs.has_value());
    REQUIRE(d.devices[1].sysfs.has_value());
    CHECK_EQ(d.devices[1].sysfs->driver, "i915");
    REQUIRE(d.devices[2].sysfs.has_value());
    CHECK_EQ(d.devices[2].sysfs->card, "card0");
    CHECK_EQ(*d.devices[2].sysfs->vram_total, 17163091968ull);
    // The APU in card10 has no device in any backend: said, not dropped silently.
    CHECK(has_note(d.notes, "sysfs: card10 (1002:15d8, amdgpu) has no device in any backend"));
}

static std::vector<Device> two_h200s() {
    Device a = dev("NVIDIA H200", Kind::Discrete, 141 * GiB), b = a;
    a.vendor_id = b.vendor_id = 0x10de;
    a.device_id = b.device_id = 0x2335;
    a.backend_index = 0, b.backend_index = 1;
    return {a, b};
}

static std::vector<Device> two_h200s_second_knows_its_address() {
    auto v = two_h200s();
    v[1].pci_address = "0000:18:00.0";
    return v;
}

TEST(identical_cards_pair_off_with_sysfs_one_to_one) {
    auto root = bt::data_path("sysfs/twins");
    auto d = gpu::discover_with({{"fixture", two_h200s}}, root);
    REQUIRE_EQ(d.devices.size(), 2u);
    REQUIRE(d.devices[0].sysfs && d.devices[1].sysfs);
    CHECK_EQ(d.devices[0].sysfs->card, "card0");
    CHECK_EQ(d.devices[1].sysfs->card, "card1");
    CHECK_EQ(*d.devices[1].sysfs->numa_node, 1);
    CHECK_EQ(d.devices[1].sysfs->driver, "nvidia");
    CHECK(d.notes.empty());
    // The driver's PCI address wins over enumeration order.
    auto e = gpu::discover_with({{"fixture", two_h200s_second_knows_its_address}}, root);
    REQUIRE(e.devices[0].sysfs && e.devices[1].sysfs);
    CHECK_EQ(e.devices[1].sysfs->card, "card0");
    CHECK_EQ(e.devices[0].sysfs->card, "card1");
}

TEST(bankml_gpu_help_documents_the_environment_and_bad_flags_exit_2) {
    auto h = bt::run_cmd(bt::bankml_bin() + " gpu --help");
    CHECK_EQ(h.code, 0);
    for (const char* v : {"BANKML_GPU=off", "BANKML_GPU=0,2", "BANKML_GPU_ALLOW_SOFTWARE=1", "BANKML_VULKAN_LOADER", "--remote"})
        CHECK(h.out.find(v) != std::string::npos);
    auto bad = bt::run_cmd(bt::bankml_bin() + " gpu --frob");
    CHECK_EQ(bad.code, 2);
    CHECK(bad.out.empty());
    CHECK(bad.err.find("--frob") != std::string::npos);
}

// The field names docs/modules/gpu.md documents, in order: a renamed or added field fails here.
static const std::vector<std::string> TOP_FIELDS = {"devices", "selected", "bankml_gpu", "allow_software", "notes", "kernels"};
static const std::vector<std::string> DEVICE_FIELDS = {
    "index", "backend", "id", "name", "kind", "vendor_id", "device_id", "vendor", "api_version", "driver",
    "device_local_bytes", "host_visible_device_local", "host_visible_device_local_bytes", "heaps", "compute_queues",
    "pci_address", "count", "usd_per_hour", "usable", "not_usable_because", "selected", "sysfs", "notes"};
static const std::vector<std::string> SYSFS_FIELDS = {"card", "vendor_id", "device_id", "driver", "vram_total_bytes",
                                                      "gtt_total_bytes", "pci_address", "numa_node"};

static std::vector<std::string> keys(const json::Value& o) {
    std::vector<std::string> k;
    if (o.is_object())
        for (const auto& m : o.as_object()) k.push_back(m.first);
    return k;
}

static std::vector<Device> report_cards() {
    Device amd = dev("AMD Radeon RX 6900 XT", Kind::Discrete, 16 * GiB);
    amd.vendor_id = 0x1002, amd.device_id = 0x73bf, amd.api_version = (1u << 22) | (3u << 12) | 239;
    amd.heaps = {{16 * GiB, true, true}, {31 * GiB, false, true}};
    amd.host_visible_device_local = true, amd.host_visible_device_local_bytes = 16 * GiB;
    amd.driver = "radv Mesa 22.3.6";
    amd.notes = {"a \"quoted\" note"};
    Device lvp = dev("llvmpipe", Kind::Cpu, GiB);
    lvp.vendor_id = 0x10005;
    Device rented = dev("8x Nvidia H200", Kind::Remote, 141 * GiB, 0);
    rented.id = "h200x8", rented.count = 8, rented.usd_per_hour = 40.0;
    return {lvp, amd, rented};
}

TEST(bankml_gpu_report_has_the_documented_fields) {
    // A constructed discovery: every field with a value, a sysfs record, a rented card.
    EnvVar g("BANKML_GPU", nullptr), a("BANKML_GPU_ALLOW_SOFTWARE", nullptr);
    auto disc = gpu::discover_with({{"fixture", report_cards}}, bt::data_path("sysfs/mixed"));
    auto v = json::parse(gpu::report_json(disc));
    CHECK(keys(v) == TOP_FIELDS);
    REQUIRE_EQ(v["devices"].size(), 3u);
    for (size_t i = 0; i < 3; i++) {
        CHECK(keys(v["devices"][i]) == DEVICE_FIELDS);
        CHECK_EQ(v["devices"][i]["index"].as_int(), int64_t(i));
        CHECK_EQ(v["devices"][i]["backend"].as_string(), "fixture");
    }
    const auto& amd = v["devices"][1];
    CHECK_EQ(amd["kind"].as_string(), "Discrete");
    CHECK_EQ(amd["vendor_id"].as_int(), 0x1002);
    CHECK_EQ(amd["device_id"].as_int(), 0x73bf);
    CHECK_EQ(amd["vendor"].as_string(), "AMD");
    CHECK_EQ(amd["api_version"].as_string(), "1.3.239");
    CHECK_EQ(amd["driver"].as_string(), "radv Mesa 22.3.6");
    CHECK_EQ(amd["device_local_bytes"].as_uint(), 16 * GiB);
    CHECK(amd["host_visible_device_local"].as_bool());
    CHECK_EQ(amd["host_visible_device_local_bytes"].as_uint(), 16 * GiB);
    REQUIRE_EQ(amd["heaps"].size(), 2u);
    CHECK(keys(amd["heaps"][1]) == (std::vector<std::string>{"bytes", "device_local", "host_visible"}));
    CHECK(!amd["heaps"][1]["device_local"].as_bool());
    CHECK_EQ(amd["compute_queues"].as_int(), 1);
    CHECK_EQ(amd["count"].as_int(), 1);
    CHECK(amd["usd_per_hour"].is_null());
    CHECK(amd["usable"].as_bool());
    CHECK(amd["not_usable_because"].is_null());
    CHECK(amd["selected"].as_bool());
    CHECK(keys(amd["sysfs"]) == SYSFS_FIELDS);
    CHECK_EQ(amd["sysfs"]["card"].as_string(), "card0");
    CHECK_EQ(amd["sysfs"]["driver"].as_string(), "amdgpu");
    CHECK_EQ(amd["sysfs"]["vram_total_bytes"].as_uint(), 17163091968ull);
    CHECK_EQ(amd["sysfs"]["gtt_total_bytes"].as_uint(), 33554432000ull);
    CHECK_EQ(amd["sysfs"]["pci_address"].as_string(), "0000:03:00.0");
    CHECK_EQ(amd["sysfs"]["numa_node"].as_int(), 1);
    REQUIRE_EQ(amd["notes"].size(), 1u);
    CHECK_EQ(amd["notes"][0].as_string(), "a \"quoted\" note");

    const auto& rented = v["devices"][2];
    CHECK_EQ(rented["kind"].as_string(), "Remote");
    CHECK_EQ(rented["id"].as_string(), "h200x8");
    CHECK_EQ(rented["count"].as_int(), 8);
    CHECK_EQ(rented["usd_per_hour"].as_double(), 40.0);
    CHECK(!rented["selected"].as_bool());
    CHECK(rented["sysfs"].is_null());
    CHECK(rented["not_usable_because"].as_string().find("rented") != std::string::npos);
    CHECK(v["devices"][0]["api_version"].is_null());

    REQUIRE_EQ(v["selected"].size(), 1u);
    CHECK_EQ(v["selected"][0].as_int(), 1);
    CHECK(v["bankml_gpu"].is_null());
    CHECK(!v["allow_software"].as_bool());
    // The sysfs cards no backend found (the i915 and the APU) and the garbage are noted.
    CHECK(note_has(v["notes"], "sysfs: card1 (8086:4680, i915) has no device in any backend"));
    CHECK(note_has(v["notes"], "('zzz')"));
    CHECK(keys(v["kernels"]) == (std::vector<std::string>{"Q1_0", "Q2_0", "F16"}));
    for (const char* k : {"Q1_0", "Q2_0", "F16"})
        CHECK(keys(v["kernels"][k]) == (std::vector<std::string>{"runs_on", "device", "why"}));
    CHECK_EQ(v["kernels"]["Q1_0"]["runs_on"].as_string(), "gpu");
    CHECK_EQ(v["kernels"]["Q1_0"]["device"].as_int(), 1);
    CHECK_EQ(v["kernels"]["Q2_0"]["runs_on"].as_string(), "gpu");  // inside the forward pass on the card
    CHECK_EQ(v["kernels"]["F16"]["device"].as_int(), 1);

    {
        EnvVar off("BANKML_GPU", "nonsense");
        auto w = json::parse(gpu::report_json(disc));
        CHECK_EQ(w["selected"].size(), 0u);
        CHECK_EQ(w["bankml_gpu"].as_string(), "nonsense");
        CHECK(note_has(w["notes"], "BANKML_GPU='nonsense'"));
        CHECK_EQ(w["kernels"]["Q1_0"]["runs_on"].as_string(), "cpu");
        CHECK_EQ(w["kernels"]["Q2_0"]["runs_on"].as_string(), "cpu");
        CHECK(w["kernels"]["F16"]["device"].is_null());
    }

    // And the real thing on this machine, whatever it has.
    auto here = bankml_gpu("");
    CHECK(keys(here.v) == TOP_FIELDS);
    for (const auto& d : here.v["devices"].as_array()) {
        CHECK(keys(d) == DEVICE_FIELDS);
        if (!d["sysfs"].is_null()) CHECK(keys(d["sysfs"]) == SYSFS_FIELDS);
    }
}

// The entry-point table compute builds on: the long-lived instance, validation, and a real device
// (lavapipe) created and destroyed cleanly through it.
TEST(vulkan_instance_and_device_table_load_on_lavapipe) {
    std::string icd = lavapipe_icd();
    if (icd.empty()) SKIP("gpu", "lavapipe (mesa-vulkan-drivers) is not installed");
    EnvVar a("VK_ICD_FILENAMES", icd.c_str()), b("VK_DRIVER_FILES", icd.c_str()), c("BANKML_VULKAN_LOADER", nullptr);
    std::optional<gpu::vulkan::Instance> inst;
    try {
        inst.emplace(true);
    } catch (const std::exception& e) {
        SKIP("gpu", std::string("no Vulkan loader usable here: ") + e.what());
    }
    const auto& vk = inst->vk();
    auto pds = inst->physical_devices();
    REQUIRE_EQ(pds.size(), 1u);
    uint32_t nq = 0;
    vk.GetPhysicalDeviceQueueFamilyProperties(pds[0], &nq, nullptr);
    std::vector<VkQueueFamilyProperties> qf(nq);
    vk.GetPhysicalDeviceQueueFamilyProperties(pds[0], &nq, qf.data());
    uint32_t family = nq;
    for (uint32_t i = 0; i < nq; i++)
        if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) family = std::min(family, i);
    REQUIRE(family < nq);
    float prio = 1.0f;
    VkDeviceQueueCreateInfo qi{};
    qi.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO;
    qi.queueFamilyIndex = family;
    qi.queueCount = 1;
    qi.pQueuePriorities = &prio;
    VkDeviceCreateInfo di{};
    di.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO;
    di.queueCreateInfoCount = 1;
    di.pQueueCreateInfos = &qi;
    VkDevice device = VK_NULL_HANDLE;
    gpu::vulkan::check(vk.CreateDevice(pds[0], &di, nullptr, &device), "vkCreateDevice(llvmpipe)");
    // Compute loads its device-level entry points itself, through vkGetDeviceProcAddr.
    auto destroy = reinterpret_cast<PFN_vkDestroyDevice>(vk.GetDeviceProcAddr(device, "vkDestroyDevice"));
    auto queue = reinterpret_cast<PFN_vkGetDeviceQueue>(vk.GetDeviceProcAddr(device, "vkGetDeviceQueue"));
    REQUIRE(destroy != nullptr);
    REQUIRE(queue != nullptr);
    VkQueue q = VK_NULL_HANDLE;
    queue(device, family, 0, &q);
    CHECK(q != VK_NULL_HANDLE);
    destroy(device, nullptr);
    // Where Khronos' layer is installed (CI installs it) validation is on, and silent.
    if (std::filesystem::exists("/usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json"))
        CHECK(inst->validation());
    CHECK(gpu::vulkan::validation_messages().empty());

    // The long-lived instance is one object for the process.
    const auto& i1 = gpu::vulkan::instance();
    const auto& i2 = gpu::vulkan::instance();
    CHECK(&i1 == &i2);
    auto d = gpu::vulkan::describe(i1, i1.physical_devices().at(0), 0);
    CHECK(d.kind == Kind::Cpu);
}
