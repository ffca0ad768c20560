// The `bankml gpu` report: the registry's view as JSON with stable field names
// (docs/modules/gpu.md, "The report", lists them all).
#include <algorithm>
#include <cstdlib>
#include <string>

#include "core/json.h"
#include "gpu/gpu.h"

namespace bankml::gpu {

namespace {

using json::Value;

Value opt(const std::optional<uint64_t>& v) { return v ? Value(*v) : Value(); }

Value sysfs_json(const Sysfs& f) {
    Value o = Value::object();
    o.set("card", f.card);
    o.set("vendor_id", f.vendor_id);
    o.set("device_id", f.device_id);
    o.set("driver", f.driver);
    o.set("vram_total_bytes", opt(f.vram_total));
    o.set("gtt_total_bytes", opt(f.gtt_total));
    o.set("pci_address", f.pci_address);
    o.set("numa_node", f.numa_node ? Value(*f.numa_node) : Value());
    return o;
}

Value device_json(const Device& d, size_t index, bool selected) {
    Value o = Value::object();
    o.set("index", index);
    o.set("backend", d.backend);
    o.set("id", d.id);
    o.set("name", d.name);
    o.set("kind", kind_name(d.kind));
    o.set("vendor_id", d.vendor_id);
    o.set("device_id", d.device_id);
    o.set("vendor", vendor_name(d.vendor_id));
    o.set("api_version", d.api_version ? Value(api_version_string(d.api_version)) : Value());
    o.set("driver", d.driver);
    o.set("device_local_bytes", d.device_local_bytes);
    o.set("host_visible_device_local", d.host_visible_device_local);
    o.set("host_visible_device_local_bytes", d.host_visible_device_local_bytes);
    Value heaps = Value::array();
    for (const auto& h : d.heaps) {
        Value hv = Value::object();
        hv.set("bytes", h.bytes);
        hv.set("device_local", h.device_local);
        hv.set("host_visible", h.host_visible);
        heaps.push(std::move(hv));
    }
    o.set("heaps", std::move(heaps));
    o.set("compute_queues", d.compute_queues);
    o.set("pci_address", d.pci_address);
    o.set("count", d.count);
    o.set("usd_per_hour", d.usd_per_hour ? Value(*d.usd_per_hour) : Value());
    o.set("usable", d.usable());
    o.set("not_usable_because", d.usable() ? Value() : Value(d.not_usable_because()));
    o.set("selected", selected);
    o.set("sysfs", d.sysfs ? sysfs_json(*d.sysfs) : Value());
    Value notes = Value::array();
    for (const auto& n : d.notes) notes.push(n);
    o.set("notes", std::move(notes));
    return o;
}

Value kernel(const char* runs_on, Value device, const char* why) {
    Value k = Value::object();
    k.set("runs_on", runs_on);
    k.set("device", std::move(device));
    k.set("why", why);
    return k;
}

// Where each kind of product would run: on the first selected card only after that card
// reproduces the CPU's bits (bankml gpu --verify).
Value kernels_json(const Selection& sel) {
    Value o = Value::object();
    if (!sel.indices.empty())
        o.set("Q1_0", kernel("gpu", Value(sel.indices[0]),
                             "the first selected card, once it gives the CPU's bits in every kernel on the card "
                             "(bankml gpu --verify, repeated with small shapes when a model opens): the whole "
                             "forward pass runs there (every layer's operations with the CPU's bits); where it "
                             "cannot (no 64-bit floats, a model over BANKML_GPU_LIMIT), the card takes a share of the "
                             "rows of each Q1_0 decode product for the matrix shapes where it measured faster "
                             "than the CPU alone, while the CPU pool computes the rest, with the same bits"));
    else
        o.set("Q1_0", kernel("cpu", Value(), sel.off ? "BANKML_GPU turns the GPU off" : "no usable GPU selected"));
    // Q2_0 and F16 run on the card only inside the whole forward pass on the card.
    const char* whole = "the first selected card, inside the whole forward pass on the card, once it gives the "
                        "CPU's bits in every kernel on the card (bankml gpu --verify, repeated with small shapes "
                        "when a model opens); otherwise the CPU";
    if (!sel.indices.empty()) {
        o.set("Q2_0", kernel("gpu", Value(sel.indices[0]), whole));
        o.set("F16", kernel("gpu", Value(sel.indices[0]), whole));
    } else {
        o.set("Q2_0", kernel("cpu", Value(), sel.off ? "BANKML_GPU turns the GPU off" : "no usable GPU selected"));
        o.set("F16", kernel("cpu", Value(), sel.off ? "BANKML_GPU turns the GPU off" : "no usable GPU selected"));
    }
    return o;
}

}  // namespace

std::string report_json(const Discovery& d) {
    Selection sel = select_from_env(d.devices);
    bool allow_sw = allow_software_from_env();
    const char* env = std::getenv("BANKML_GPU");

    Value devices = Value::array();
    for (size_t i = 0; i < d.devices.size(); i++) {
        bool is_sel = std::find(sel.indices.begin(), sel.indices.end(), i) != sel.indices.end();
        devices.push(device_json(d.devices[i], i, is_sel));
    }
    Value selected = Value::array();
    for (size_t i : sel.indices) selected.push(i);
    Value notes = Value::array();
    for (const auto& n : d.notes) notes.push(n);
    for (const auto& n : sel.notes) notes.push(n);
    if (allow_sw) notes.push("BANKML_GPU_ALLOW_SOFTWARE=1: software renderers may be selected (for testing only)");

    Value o = Value::object();
    o.set("devices", std::move(devices));
    o.set("selected", std::move(selected));
    o.set("bankml_gpu", env ? Value(env) : Value());
    o.set("allow_software", allow_sw);
    o.set("notes", std::move(notes));
    o.set("kernels", kernels_json(sel));
    return json::write(o, 2) + "\n";
}

std::string report_json(bool remote) { return report_json(discover(remote)); }

}  // namespace bankml::gpu
