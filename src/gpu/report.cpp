// The `bankml gpu` report: the registry's view as JSON with stable field names
// (docs/modules/gpu.md, "The report", lists them all).
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "gpu/gpu.h"

namespace bankml::gpu {

namespace {

// A minimal JSON writer for this report: strings escaped, numbers exact, nothing else.
struct Out {
    std::string s;
    void str(const std::string& v) {
        s += '"';
        for (unsigned char c : v) {
            switch (c) {
            case '"': s += "\\\""; break;
            case '\\': s += "\\\\"; break;
            case '\n': s += "\\n"; break;
            case '\r': s += "\\r"; break;
            case '\t': s += "\\t"; break;
            default:
                if (c < 0x20) {
                    char b[8];
                    std::snprintf(b, sizeof b, "\\u%04x", c);
                    s += b;
                } else {
                    s += char(c);  // UTF-8 passes through; the reader validates it
                }
            }
        }
        s += '"';
    }
    void key(const char* k) {
        str(k);
        s += ": ";
    }
    void num(uint64_t v) { s += std::to_string(v); }
    void num(int64_t v) { s += std::to_string(v); }
    void real(double v) {
        char b[32];
        auto r = std::to_chars(b, b + sizeof b, v);  // shortest text that reads back as v
        s.append(b, r.ptr);
    }
    void boolean(bool v) { s += v ? "true" : "false"; }
    void null() { s += "null"; }
    void strings(const std::vector<std::string>& v) {
        s += '[';
        for (size_t i = 0; i < v.size(); i++) {
            if (i) s += ", ";
            str(v[i]);
        }
        s += ']';
    }
};

void write_sysfs(Out& o, const Sysfs& f) {
    o.s += '{';
    o.key("card"), o.str(f.card), o.s += ", ";
    o.key("vendor_id"), o.num(uint64_t(f.vendor_id)), o.s += ", ";
    o.key("device_id"), o.num(uint64_t(f.device_id)), o.s += ", ";
    o.key("driver"), o.str(f.driver), o.s += ", ";
    o.key("vram_total_bytes");
    if (f.vram_total) o.num(*f.vram_total); else o.null();
    o.s += ", ";
    o.key("gtt_total_bytes");
    if (f.gtt_total) o.num(*f.gtt_total); else o.null();
    o.s += ", ";
    o.key("pci_address"), o.str(f.pci_address), o.s += ", ";
    o.key("numa_node");
    if (f.numa_node) o.num(int64_t(*f.numa_node)); else o.null();
    o.s += '}';
}

void write_device(Out& o, const Device& d, size_t index, bool selected) {
    o.s += "    {";
    o.key("index"), o.num(uint64_t(index)), o.s += ", ";
    o.key("backend"), o.str(d.backend), o.s += ", ";
    o.key("id"), o.str(d.id), o.s += ", ";
    o.key("name"), o.str(d.name), o.s += ", ";
    o.key("kind"), o.str(kind_name(d.kind)), o.s += ",\n     ";
    o.key("vendor_id"), o.num(uint64_t(d.vendor_id)), o.s += ", ";
    o.key("device_id"), o.num(uint64_t(d.device_id)), o.s += ", ";
    o.key("vendor"), o.str(vendor_name(d.vendor_id)), o.s += ", ";
    o.key("api_version");
    if (d.api_version) o.str(api_version_string(d.api_version)); else o.null();
    o.s += ", ";
    o.key("driver"), o.str(d.driver), o.s += ",\n     ";
    o.key("device_local_bytes"), o.num(d.device_local_bytes), o.s += ", ";
    o.key("host_visible_device_local"), o.boolean(d.host_visible_device_local), o.s += ", ";
    o.key("host_visible_device_local_bytes"), o.num(d.host_visible_device_local_bytes), o.s += ",\n     ";
    o.key("heaps"), o.s += '[';
    for (size_t i = 0; i < d.heaps.size(); i++) {
        if (i) o.s += ", ";
        o.s += '{';
        o.key("bytes"), o.num(d.heaps[i].bytes), o.s += ", ";
        o.key("device_local"), o.boolean(d.heaps[i].device_local), o.s += ", ";
        o.key("host_visible"), o.boolean(d.heaps[i].host_visible), o.s += '}';
    }
    o.s += "], ";
    o.key("compute_queues"), o.num(uint64_t(d.compute_queues)), o.s += ", ";
    o.key("pci_address"), o.str(d.pci_address), o.s += ", ";
    o.key("count"), o.num(uint64_t(d.count)), o.s += ", ";
    o.key("usd_per_hour");
    if (d.usd_per_hour) o.real(*d.usd_per_hour); else o.null();
    o.s += ",\n     ";
    o.key("usable"), o.boolean(d.usable()), o.s += ", ";
    o.key("not_usable_because");
    if (d.usable()) o.null(); else o.str(d.not_usable_because());
    o.s += ", ";
    o.key("selected"), o.boolean(selected), o.s += ",\n     ";
    o.key("sysfs");
    if (d.sysfs) write_sysfs(o, *d.sysfs); else o.null();
    o.s += ", ";
    o.key("notes"), o.strings(d.notes);
    o.s += '}';
}

// Where each kind of product would run. Q1_0 is the only GPU kernel, and it runs on the first
// selected card only after that card reproduces the CPU's bits (bankml gpu --verify).
void write_kernels(Out& o, const Selection& sel) {
    o.s += "{\n";
    o.s += "    ";
    o.key("Q1_0"), o.s += '{';
    if (!sel.indices.empty()) {
        o.key("runs_on"), o.str("gpu"), o.s += ", ";
        o.key("device"), o.num(uint64_t(sel.indices[0])), o.s += ", ";
        o.key("why"), o.str("the first selected card, once it gives the CPU kernel's bits on the card "
                            "(bankml gpu --verify); the CPU pool computes the rest of each matrix");
    } else {
        o.key("runs_on"), o.str("cpu"), o.s += ", ";
        o.key("device"), o.null(), o.s += ", ";
        o.key("why"), o.str(sel.off ? "BANKML_GPU turns the GPU off" : "no usable GPU selected");
    }
    o.s += "},\n    ";
    o.key("Q2_0"), o.s += '{';
    o.key("runs_on"), o.str("cpu"), o.s += ", ";
    o.key("device"), o.null(), o.s += ", ";
    o.key("why"), o.str("no GPU kernel for Q2_0 (ternary) yet");
    o.s += "},\n    ";
    o.key("F16"), o.s += '{';
    o.key("runs_on"), o.str("cpu"), o.s += ", ";
    o.key("device"), o.null(), o.s += ", ";
    o.key("why"), o.str("no GPU kernel for F16 yet");
    o.s += "}\n  }";
}

}  // namespace

std::string report_json(const Discovery& d) {
    Selection sel = select_from_env(d.devices);
    bool allow_sw = allow_software_from_env();
    const char* env = std::getenv("BANKML_GPU");
    std::vector<std::string> notes = d.notes;
    notes.insert(notes.end(), sel.notes.begin(), sel.notes.end());
    if (allow_sw)
        notes.push_back("BANKML_GPU_ALLOW_SOFTWARE=1: software renderers may be selected (for testing only)");

    Out o;
    o.s += "{\n  ";
    o.key("devices"), o.s += "[";
    for (size_t i = 0; i < d.devices.size(); i++) {
        o.s += i ? ",\n" : "\n";
        bool is_sel = false;
        for (size_t k : sel.indices) is_sel = is_sel || k == i;
        write_device(o, d.devices[i], i, is_sel);
    }
    o.s += d.devices.empty() ? "],\n  " : "\n  ],\n  ";
    o.key("selected"), o.s += '[';
    for (size_t i = 0; i < sel.indices.size(); i++) {
        if (i) o.s += ", ";
        o.num(uint64_t(sel.indices[i]));
    }
    o.s += "],\n  ";
    o.key("bankml_gpu");
    if (env) o.str(env); else o.null();
    o.s += ",\n  ";
    o.key("allow_software"), o.boolean(allow_sw), o.s += ",\n  ";
    o.key("notes"), o.strings(notes), o.s += ",\n  ";
    o.key("kernels"), write_kernels(o, sel);
    o.s += "\n}\n";
    return o.s;
}

std::string report_json(bool remote) { return report_json(discover(remote)); }

}  // namespace bankml::gpu
