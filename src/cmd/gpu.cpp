#include <cstdio>

#include "cmd/commands.h"
#include "core/error.h"
#include "cmd/gpu_verify.h"
#include "core/json.h"
#include "gpu/compute.h"
#include "gpu/gpu.h"
#include "gpu/limiter.h"
#include "model/forward.h"

namespace bankml::cmd {

// --status: what a model would get on the first selected card, without a dispatch: the limit and
// its parts, the heap, the budget, and with -m whether the model's whole-token pass fits.
static int gpu_status(const cli::Args& a) {
    const gpu::LimitSetting l = gpu::limit_from_env();
    json::Value o;
    o.set("card", json::Value()).set("limit", l.value).set("limit_given", l.given);
    gpu::Discovery d = gpu::discover();
    gpu::Selection sel = gpu::select_from_env(d.devices);
    std::unique_ptr<gpu::Gpu> card;
    std::string why = sel.off ? "BANKML_GPU is off" : "no usable card";
    for (const std::string& n : sel.notes) why += "; " + n;
    if (!sel.indices.empty()) {
        const gpu::Device& dev = d.devices[sel.indices[0]];
        try {
            if (dev.backend != "vulkan") throw Error("backend " + dev.backend + " has no compute");
            card = std::make_unique<gpu::Gpu>(gpu::Gpu::open(dev.backend_index));
        } catch (const std::exception& e) {
            why = dev.name + ": " + e.what();
        }
    }
    std::unique_ptr<model::Model> m;
    if (a.has("model")) {
        model::ModelOptions mo;
        mo.threads = 1;
        mo.ctx = (int)a.get_int("ctx-size", 0, 0, 1 << 24);
        m = model::Model::open(a.get("model", ""), mo);
    }
    if (!card) {
        o.set("why", why);
        if (m) o.set("model", json::Value().set("path", a.get("model", "")).set("runs", "cpu"));
        std::printf("%s\n", json::write(o, 2).c_str());
        return 0;
    }
    gpu::CardUse use(*card, gpu::CardUse::Mode::forward, l);
    o.set("card", card->name())
        .set("kind", gpu::kind_name(card->kind()))
        .set("integrated", card->kind() == gpu::Kind::Integrated)
        .set("time_limit", use.time_part())
        .set("heap_bytes", (unsigned long long)use.heap_bytes())
        .set("budget_bytes", (unsigned long long)use.budget_bytes())
        .set("whole_token", card->has_f64());
    if (m) {
        const uint64_t need = m->gpu_bytes();
        const bool fits = card->has_f64() && use.fits(need);
        json::Value mj;
        mj.set("path", a.get("model", ""))
            .set("ctx", m->n_ctx())
            .set("card_bytes", (unsigned long long)need)
            .set("fits", use.fits(need))
            // Where decoding would run once the card verifies: the whole token on the card, a
            // share of the Q1_0 products per shape, or the CPU.
            .set("runs", fits ? "forward" : m->has_q1_0() ? "share" : "cpu");
        o.set("model", std::move(mj));
    }
    std::printf("%s\n", json::write(o, 2).c_str());
    return 0;
}

static int run_gpu(const std::vector<std::string>& args) {
    cli::Args a(args, {{"--remote", false}, {"--verify", false}, {"--full", false}, {"--json", false}, {"--dump-spirv", true},
                       {"--status", false}, {"-m|--model", true}, {"-c|--ctx-size", true}});
    if (a.has("dump-spirv")) return gpu_dump_spirv(a.get("dump-spirv", ""));
    if (a.has("status")) return gpu_status(a);
    if (a.has("model") || a.has("ctx-size")) throw UsageError("gpu: -m and -c go with --status");
    if (a.has("verify")) return gpu_verify(true, a.has("full"), a.has("json"));
    if (a.has("full")) throw UsageError("gpu: --full goes with --verify");
    std::fputs(gpu::report_json(a.has("remote")).c_str(), stdout);
    return 0;
}

const cli::Command gpu_command = {
    "gpu", "every video card found, which bankml would use, as JSON",
    "usage: bankml gpu [--remote] [--verify [--full] [--json]] [--status [-m FILE] [-c CTX]] [--dump-spirv DIR]\n"
    "\n"
    "Prints, as JSON, every video card the backends find (Vulkan, through the loader opened at run\n"
    "time, merged with /sys/class/drm), whether each is usable and why not, which bankml would use\n"
    "and in what order, notes on why a backend found nothing, and where the Q1_0, Q2_0 and F16\n"
    "products would run. Exit code 0 with or without a card. docs/modules/gpu.md names every field.\n"
    "\n"
    "  --remote   also list rented GPUs (listed only: never selected, started or paid for): Hugging\n"
    "             Face's Jobs hardware, read with the system curl; why there are none goes in notes\n"
    "  --verify   runs the bit-exact on-card oracle on each selected card: the native-Fma probe, the\n"
    "             Q1_0 products, then every op kernel of the forward pass (rms_norm, rms_norm_q8,\n"
    "             prep_act, q2_0_mat_vec, f16_mat_vec, head_norm_rope, attention, attention_q8,\n"
    "             swiglu, expf, f16_round, div_sqrt, embed_q1_0, embed_q2_0, embed_f16) on random\n"
    "             and adversarial data; one line per kernel and shape, which kernels the card uses\n"
    "             (native Fma only where proven), or NOT VERIFIED\n"
    "             (exit code 2: a card failing any kernel is refused whole); no usable card: exit code 0\n"
    "  --full     with --verify: also expf and f16_round on every one of the 2^32 floats\n"
    "  --json     with --verify: one JSON document, {\"devices\":[{\"index\",\"name\",\"verified\",\n"
    "             \"reason\",\"kernels\":[{\"name\",\"shape\",\"rows\",\"bit_exact\",\"ms\"}]}]}\n"
    "  --status   runs nothing on the card: what bankml may take of the first selected card\n"
    "             (BANKML_GPU_LIMIT, whether rests apply, the heap and the budget within it), and with\n"
    "             -m FILE (and -c CTX) what the model needs there and where it would run: \"forward\"\n"
    "             (every token on the card), \"share\" (a share of the Q1_0 products, per shape where\n"
    "             it pays) or \"cpu\"\n"
    "  --dump-spirv DIR   writes every SPIR-V module bankml would load into DIR (driver bug reports;\n"
    "             the op kernels for both Fma paths: rms_norm.spv, rms_norm_fma.spv, ...)\n"
    "\n"
    "Only integrated and discrete cards with a compute queue are used, discrete first, then by\n"
    "device-local memory, largest first. Software renderers (llvmpipe, SwiftShader) are listed, never\n"
    "used.\n"
    "\n"
    "environment:\n"
    "  BANKML_GPU=off        (also none, cpu) no GPU: everything runs on the CPU\n"
    "  BANKML_GPU=0,2        only the devices with these indices (as this report numbers them)\n"
    "                        a value that is neither is reported in notes and selects no GPU\n"
    "  BANKML_GPU_LIMIT=0.8  the share of the card's memory and time bankml may take (0.05-1):\n"
    "                        its buffers stay within that share of the card's heap (and of the RAM\n"
    "                        an integrated card shares); after d of card work the card rests\n"
    "                        d*(1-L)/L and work arriving meanwhile runs on the CPU (same bits).\n"
    "                        Unset, the memory part applies to every card and the rests only to\n"
    "                        integrated cards; set, both apply to every card\n"
    "  BANKML_GPU_SHARE=0.3  the card's share of each Q1_0 product's rows when the whole token\n"
    "                        cannot run on the card (0-0.95; default: calibrated). Each matrix shape\n"
    "                        then tries the card and the CPU and keeps the faster\n"
    "  BANKML_GPU_ALLOW_SOFTWARE=1   lets a software renderer be selected (testing on CI only)\n"
    "  BANKML_VULKAN_LOADER=PATH     the Vulkan loader library to open instead of libvulkan.so.1\n"
    "  BANKML_SYSFS_ROOT=DIR         the directory read in place of /sys (tests)\n"
    "  BANKML_HF_TIMEOUT=SECONDS     curl's time limit for --remote (default 20)\n",
    run_gpu};

}  // namespace bankml::cmd
