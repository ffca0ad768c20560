// The card's compiler statistics per pipeline (VK_KHR_pipeline_executable_properties).
#include <cstdlib>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "gpu/compute.h"
#include "gpu/kernels.h"
#include "gpu/vulkan.h"
#include "gpu_device.h"
#include "test.h"

using namespace bankml::gpu;

namespace {

// Asked of Vulkan directly, apart from compute: does physical device `index` list the extension
// with its pipelineExecutableInfo feature on?
bool device_offers_statistics(size_t index) {
    const auto& inst = vulkan::instance();
    const auto& vk = inst.vk();
    if (!vk.GetPhysicalDeviceFeatures2 || inst.api_version() < VK_API_VERSION_1_1) return false;
    VkPhysicalDevice pd = inst.physical_devices().at(index);
    uint32_t n = 0;
    vulkan::check(vk.EnumerateDeviceExtensionProperties(pd, nullptr, &n, nullptr), "vkEnumerateDeviceExtensionProperties");
    std::vector<VkExtensionProperties> exts(n);
    vulkan::check(vk.EnumerateDeviceExtensionProperties(pd, nullptr, &n, exts.data()), "vkEnumerateDeviceExtensionProperties");
    bool listed = false;
    for (uint32_t i = 0; i < n; ++i)
        listed |= std::string(exts[i].extensionName) == "VK_KHR_pipeline_executable_properties";
    VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR pe{};
    pe.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR;
    VkPhysicalDeviceFeatures2 f2{};
    f2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
    f2.pNext = &pe;
    vk.GetPhysicalDeviceFeatures2(pd, &f2);
    return listed && pe.pipelineExecutableInfo;
}

// "<name> <value>": a non-empty name (it may hold spaces), one space, then true, false, an
// integer or a float, and nothing else.
bool well_formed(const std::string& line) {
    size_t sp = line.rfind(' ');
    if (sp == std::string::npos || sp == 0 || line[0] == ' ' || line[sp - 1] == ' ') return false;
    std::string v = line.substr(sp + 1);
    if (v == "true" || v == "false") return true;
    if (v.empty()) return false;
    char* end = nullptr;
    std::strtod(v.c_str(), &end);
    return *end == '\0';
}

}  // namespace

TEST(gpu_statistic_lines_are_checked_for_form) {
    CHECK(well_formed("Register Count 64"));
    CHECK(well_formed("Code size -3"));
    CHECK(well_formed("Occupancy 0.75"));
    CHECK(well_formed("Spills false"));
    CHECK(!well_formed("Register Count"));
    CHECK(!well_formed("64"));
    CHECK(!well_formed(" 64"));
    CHECK(!well_formed("Register Count  64"));
    CHECK(!well_formed("Register Count 64 "));
    CHECK(!well_formed("Instructions (format 7)"));
}

// compute's own formatter (what pipeline_statistics returns, line by line) on every value format,
// on any machine: a card with statistics is not needed to test how they are written.
TEST(gpu_statistic_line_formats_every_value_type) {
    auto stat = [](const char* name, VkPipelineExecutableStatisticFormatKHR f) {
        VkPipelineExecutableStatisticKHR s{};
        s.sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR;
        std::strncpy(s.name, name, VK_MAX_DESCRIPTION_SIZE);
        s.format = f;
        return s;
    };
    auto b = stat("Spills", VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR);
    b.value.b32 = VK_TRUE;
    auto i = stat("Code size delta", VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR);
    i.value.i64 = -9223372036854775807LL - 1;
    auto u = stat("Register Count", VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR);
    u.value.u64 = 18446744073709551615ULL;
    auto f = stat("Occupancy", VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_FLOAT64_KHR);
    f.value.f64 = 0.75;
    auto big = stat("Cycles", VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_FLOAT64_KHR);
    big.value.f64 = 1.5e300;
    auto odd = stat("Instructions", VkPipelineExecutableStatisticFormatKHR(7));
    CHECK_EQ(statistic_line(b), "Spills true");
    b.value.b32 = VK_FALSE;
    CHECK_EQ(statistic_line(b), "Spills false");
    CHECK_EQ(statistic_line(i), "Code size delta -9223372036854775808");
    CHECK_EQ(statistic_line(u), "Register Count 18446744073709551615");
    CHECK_EQ(statistic_line(f), "Occupancy 0.75");
    CHECK_EQ(statistic_line(big), "Cycles 1.5e+300");
    CHECK_EQ(statistic_line(odd), "Instructions (format 7)");  // readable, and refused by well_formed
    for (const auto* s : {&b, &i, &u, &f, &big}) CHECK(well_formed(statistic_line(*s)));
    CHECK(!well_formed(statistic_line(odd)));
    // A name filling all 256 bytes without a NUL is read to its end, never past it.
    auto full = stat("", VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR);
    std::memset(full.name, 'n', VK_MAX_DESCRIPTION_SIZE);
    full.value.u64 = 3;
    CHECK_EQ(statistic_line(full), std::string(VK_MAX_DESCRIPTION_SIZE, 'n') + " 3");
}

TEST(gpu_pipeline_statistics_are_name_value_lines_where_the_card_offers_them) {
    bt::TestGpu& s = bt::test_gpu_device();
    if (!s.gpu) SKIP("gpu", s.why);
    Gpu& g = *s.gpu;
    // Compute enables the extension exactly when the device offers it.
    CHECK_EQ(g.has_pipeline_statistics(), device_offers_statistics(s.index));
    Pipeline p = g.pipeline(kernels::fma_probe(), 2, 4);
    auto lines = g.pipeline_statistics(p);
    std::printf("    %s: %s, %zu statistics\n", g.name().c_str(),
                g.has_pipeline_statistics() ? "VK_KHR_pipeline_executable_properties enabled" : "no statistics",
                lines.size());
    for (const auto& l : lines) std::printf("    %s\n", l.c_str());
    if (g.has_pipeline_statistics()) {
        CHECK(!lines.empty());
        for (const auto& l : lines) CHECK(well_formed(l));
        CHECK_EQ(g.pipeline_statistics(p), lines);  // asked again, the same answer
    } else {
        CHECK(lines.empty());
    }
    CHECK_THROWS(g.pipeline_statistics(Pipeline{p.id + 1000000, 2, 4}), "not on this card");
    // The queries themselves are valid Vulkan (the kernels' validation test ran before them).
    if (Gpu::validation_enabled()) {
        auto msgs = Gpu::validation_messages();
        for (auto& m : msgs) std::printf("    validation: %s\n", m.c_str());
        CHECK(msgs.empty());
    }
}
