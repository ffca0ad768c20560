// Hugging Face's rented GPUs: parse() on fixtures in the API's shape (tests/data/hf-*.json), the
// curl subprocess with fake curls first on PATH (never the network), and `bankml gpu --remote`.
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <random>

#include "core/json.h"
#include "gpu/gpu.h"
#include "gpu/hf.h"
#include "test.h"

using namespace bankml;
using namespace bankml::gpu;

static std::string fixture(const std::string& name) {
    auto b = bt::read_file(bt::data_path(name));
    return std::string(b.begin(), b.end());
}

static const Device* by_id(const std::vector<Device>& devs, const std::string& id) {
    for (const auto& d : devs)
        if (d.id == id) return &d;
    return nullptr;
}

static bool has_note(const std::vector<std::string>& notes, const std::string& part) {
    for (const auto& n : notes)
        if (n.find(part) != std::string::npos) return true;
    return false;
}

TEST(a_multi_card_flavor_is_one_device_with_its_count) {
    std::string text = fixture("hf-hardware.json");
    hf::Parsed p = hf::parse(text);
    // Independently: the GPU flavors of the fixture, read with the JSON reader.
    json::Value doc = json::parse(text);
    size_t gpus = 0;
    for (const auto& f : doc.as_array())
        if (!f["accelerator"].is_null()) ++gpus;
    CHECK_EQ(p.flavors, doc.size());
    REQUIRE_EQ(p.devices.size(), gpus);
    CHECK(p.notes.empty());
    size_t h200x8 = 0;
    for (const auto& d : p.devices) h200x8 += d.id == "h200x8";
    CHECK_EQ(h200x8, size_t(1));
    const Device* d = by_id(p.devices, "h200x8");
    REQUIRE(d != nullptr);
    CHECK_EQ(d->name, "8x Nvidia H200");
    CHECK_EQ(d->count, 8u);
    CHECK(d->kind == Kind::Remote);
    CHECK(!d->usable());
    CHECK_EQ(d->vendor_id, 0x10deu);
    CHECK_EQ(d->device_local_bytes, uint64_t(141e9));  // 1128 GB for the flavor, per card
    CHECK(has_note(d->notes, "1128 GB for the flavor"));
    CHECK(has_note(d->notes, "141 GB per card"));
    REQUIRE(d->usd_per_hour.has_value());
    CHECK_NEAR(*d->usd_per_hour, 0.666667 * 60, 1e-9);
    // One to eight cards, each flavor with its own count.
    CHECK_EQ(by_id(p.devices, "t4-small")->count, 1u);
    CHECK_EQ(by_id(p.devices, "a10g-largex2")->count, 2u);
    CHECK_EQ(by_id(p.devices, "l4x4")->count, 4u);
    CHECK_EQ(by_id(p.devices, "l4x4")->device_local_bytes, uint64_t(24e9));
    CHECK_EQ(by_id(p.devices, "a100x8")->count, 8u);
    CHECK_EQ(by_id(p.devices, "a100x8")->device_local_bytes, uint64_t(80e9));
    // CPU flavors are counted, never listed.
    CHECK(by_id(p.devices, "cpu-basic") == nullptr);
    CHECK(by_id(p.devices, "cpu-upgrade") == nullptr);
    // The API's order is kept.
    CHECK_EQ(p.devices.front().id, "t4-small");
    CHECK_EQ(p.devices.back().id, "h200x8");
}

TEST(hf_prices_per_minute_become_per_hour_and_other_units_are_a_note) {
    hf::Parsed p = hf::parse(fixture("hf-odd.json"));
    const Device* q = by_id(p.devices, "qty-number");
    REQUIRE(q != nullptr);
    REQUIRE(q->usd_per_hour.has_value());
    CHECK_NEAR(*q->usd_per_hour, 3.0, 1e-12);  // unitCostUSD 0.05 per minute, no micro field
    const Device* micro = by_id(p.devices, "extra-fields");
    REQUIRE(micro != nullptr && micro->usd_per_hour.has_value());
    CHECK_NEAR(*micro->usd_per_hour, 0.40002, 1e-12);  // unitCostMicroUSD preferred: 6667 x 60 / 1e6
    const Device* hour = by_id(p.devices, "per-hour");
    REQUIRE(hour != nullptr);
    CHECK(!hour->usd_per_hour.has_value());
    CHECK(has_note(hour->notes, "per 'hour'"));
    const Device* nolabel = by_id(p.devices, "no-label");
    REQUIRE(nolabel != nullptr);
    CHECK(!nolabel->usd_per_hour.has_value());
    CHECK(has_note(nolabel->notes, "'unitLabel' missing"));
    const Device* noprice = by_id(p.devices, "no-price");
    REQUIRE(noprice != nullptr);
    CHECK(!noprice->usd_per_hour.has_value());
    CHECK(has_note(noprice->notes, "no price"));
}

TEST(hf_odd_and_missing_fields_are_tolerated_and_named_in_notes) {
    hf::Parsed p = hf::parse(fixture("hf-odd.json"));
    CHECK_EQ(p.flavors, size_t(17));
    // Every GPU flavor is listed, whatever is missing; the TPU, the CPU flavor, the entry without
    // an accelerator field and the two non-objects are not.
    CHECK_EQ(p.devices.size(), size_t(12));
    CHECK(by_id(p.devices, "v5e-1x1") == nullptr);
    CHECK(by_id(p.devices, "no-accelerator-field") == nullptr);
    CHECK(has_note(p.notes, "2 entries of the list are not objects"));
    CHECK(has_note(p.notes, "1 flavor without an 'accelerator' field"));
    CHECK(has_note(p.notes, "1 flavor with an accelerator that is not a GPU"));

    const Device* extra = by_id(p.devices, "extra-fields");
    REQUIRE(extra != nullptr);
    CHECK_EQ(extra->notes.size(), size_t(1));  // only the memory line: unknown fields are no news
    CHECK_EQ(by_id(p.devices, "qty-number")->count, 2u);
    const Device* words = by_id(p.devices, "qty-words");
    CHECK_EQ(words->count, 1u);
    CHECK(has_note(words->notes, "\"eight\" is not a positive integer: taken as 1"));
    const Device* novram = by_id(p.devices, "no-vram");
    CHECK_EQ(novram->device_local_bytes, uint64_t(0));
    CHECK(has_note(novram->notes, "no memory size ('vram')"));
    const Device* gib = by_id(p.devices, "vram-gib");
    CHECK_EQ(gib->device_local_bytes, uint64_t(192) << 30);
    CHECK_EQ(gib->vendor_id, 0x1002u);
    CHECK(has_note(by_id(p.devices, "vram-bad")->notes, "\"lots\" is not a size"));
    const Device* nopretty = by_id(p.devices, "no-pretty");
    CHECK_EQ(nopretty->name, "no-pretty");
    CHECK(has_note(nopretty->notes, "no 'prettyName'"));
    const Device* nameless = nullptr;
    for (const auto& d : p.devices)
        if (d.name == "Nameless") nameless = &d;
    REQUIRE(nameless != nullptr);
    CHECK_EQ(nameless->id, "");
    CHECK(has_note(nameless->notes, "cannot be asked for by name"));
    CHECK(has_note(by_id(p.devices, "no-type")->notes, "taken as a GPU"));
}

TEST(hf_documents_that_are_not_a_list_of_flavors_are_one_note) {
    struct Case { const char* file; const char* says; };
    const Case cases[] = {
        {"hf-not-json.json", "the answer is not JSON (97 bytes; json: at byte 0: expected a value"},
        {"hf-truncated.json", "the answer is not JSON"},
        {"hf-object.json", "the answer is a JSON object, not an array of flavors"},
        {"hf-empty.json", "an empty list of flavors"},
        {"hf-cpu-only.json", "no GPU flavors among the 2 flavors"},
    };
    for (const auto& c : cases) {
        hf::Parsed p = hf::parse(fixture(c.file));
        CHECK(p.devices.empty());
        REQUIRE_EQ(p.notes.size(), size_t(1));
        if (!CHECK(p.notes[0].find(c.says) != std::string::npos)) std::printf("    %s: %s\n", c.file, p.notes[0].c_str());
    }
    std::string trunc = fixture("hf-truncated.json");
    hf::Parsed t = hf::parse(trunc);
    CHECK(t.notes[0].find("at byte " + std::to_string(trunc.size())) != std::string::npos);
    CHECK(hf::parse("").notes[0].find("at byte 0") != std::string::npos);
}

TEST(hf_sizes_parse_with_their_units) {
    uint64_t b = 0;
    CHECK(hf::parse_size("1128 GB", b));
    CHECK_EQ(b, uint64_t(1128e9));
    CHECK(hf::parse_size(" 80GB ", b));
    CHECK_EQ(b, uint64_t(80e9));
    CHECK(hf::parse_size("384GiB", b));
    CHECK_EQ(b, uint64_t(384) << 30);
    CHECK(hf::parse_size("16 gb", b));
    CHECK_EQ(b, uint64_t(16e9));
    CHECK(hf::parse_size("1.5 TB", b));
    CHECK_EQ(b, uint64_t(1.5e12));
    CHECK(hf::parse_size("512 MiB", b));
    CHECK_EQ(b, uint64_t(512) << 20);
    for (const char* bad : {"", "GB", "lots", "80", "80 GB extra", "-8 GB", "1e999 GB", "8 XB", "1.2.3 GB"})
        if (!CHECK(!hf::parse_size(bad, b))) std::printf("    accepted '%s'\n", bad);
}

// Every prefix of each fixture and random byte flips: parse never throws or crashes, and every
// device it returns is a Remote one with at least one card.
TEST(hf_parse_survives_every_prefix_and_random_byte_flips) {
    std::mt19937_64 rng(2026);
    size_t devices = 0, notes = 0;
    for (const char* f : {"hf-hardware.json", "hf-odd.json", "hf-cpu-only.json", "hf-object.json"}) {
        std::string text = fixture(f);
        size_t end = text.find_last_not_of(" \n") + 1;  // the document without its trailing newline
        for (size_t n = 0; n <= text.size(); n += (text.size() > 2000 ? 3 : 1)) {
            hf::Parsed p = hf::parse(std::string_view(text).substr(0, n));
            devices += p.devices.size();
            notes += p.notes.size();
            if (n < end) CHECK(p.devices.empty() && !p.notes.empty());  // a strict prefix is never JSON
        }
        for (int k = 0; k < 400; ++k) {
            std::string m = text;
            for (int i = 0, nf = 1 + int(rng() % 4); i < nf; ++i) m[rng() % m.size()] = char(rng() & 0xFF);
            hf::Parsed p = hf::parse(m);
            for (const auto& d : p.devices) {
                CHECK(d.kind == Kind::Remote);
                CHECK_GE(d.count, 1u);
            }
            devices += p.devices.size();
            notes += p.notes.size();
        }
    }
    CHECK_GT(devices, size_t(0));
    CHECK_GT(notes, size_t(0));
}

TEST(hf_curl_argv_is_a_vector_with_limits_and_the_url_last) {
    hf::FetchOptions o;
    o.timeout_s = 7.5;
    o.connect_timeout_s = 3;
    o.max_bytes = 12345;
    auto a = hf::curl_argv(o);
    REQUIRE(a.size() >= 2);
    CHECK_EQ(a.front(), "curl");
    CHECK_EQ(a.back(), std::string(hf::HARDWARE_URL));
    CHECK_EQ(std::string(hf::HARDWARE_URL), "https://huggingface.co/api/jobs/hardware");
    auto after = [&](const std::string& flag) {
        auto it = std::find(a.begin(), a.end(), flag);
        return it != a.end() && it + 1 != a.end() ? *(it + 1) : std::string("<absent>");
    };
    CHECK(std::find(a.begin(), a.end(), "-fsSL") != a.end());
    CHECK_EQ(after("--max-time"), "7.5");
    CHECK_EQ(after("--connect-timeout"), "3");
    CHECK_EQ(after("--max-filesize"), "12345");
    CHECK_EQ(after("--proto"), "=https");
}

// ---------------------------------------------------------------------------------------------
// The subprocess, with fake curls.

namespace {
// A directory holding one executable `curl` script with the given body.
std::string fake_curl_dir(const std::string& body) {
    std::string dir = bt::temp_dir();
    std::string path = dir + "/curl";
    std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
    chmod(path.c_str(), 0755);
    return dir;
}

// Puts dir first on PATH (or makes PATH just dir) for this scope.
struct PathFirst {
    std::string old;
    PathFirst(const std::string& dir, bool only) {
        const char* o = std::getenv("PATH");
        old = o ? o : "";
        std::string p = only ? dir : dir + ":" + old;
        setenv("PATH", p.c_str(), 1);
    }
    ~PathFirst() { setenv("PATH", old.c_str(), 1); }
};

// fetch() with the fake first on PATH: the body, or the error's message prefixed with "ERROR: ".
std::string fetch_with(const std::string& dir, hf::FetchOptions o = {}, bool only = false) {
    PathFirst p(dir, only);
    try {
        return hf::fetch(o);
    } catch (const Error& e) {
        return std::string("ERROR: ") + e.what();
    }
}
}  // namespace

TEST(hf_fetch_returns_what_curl_prints_and_passes_the_argv_without_a_shell) {
    std::string dir = bt::temp_dir();
    std::string args_file = dir + "/args";
    std::string curl_dir = fake_curl_dir("for a in \"$@\"; do printf '%s\\n' \"$a\"; done > '" + args_file +
                                         "'\ncat '" + bt::data_path("hf-hardware.json") + "'");
    std::string body = fetch_with(curl_dir);
    CHECK_EQ(body, fixture("hf-hardware.json"));
    // The arguments arrive one by one, exactly as curl_argv made them (no shell splitting).
    auto raw = bt::read_file(args_file);
    std::string got(raw.begin(), raw.end());
    std::string want;
    auto argv = hf::curl_argv({});
    for (size_t i = 1; i < argv.size(); ++i) want += argv[i] + "\n";
    CHECK_EQ(got, want);
    CHECK(got.find("Accept: application/json\n") != std::string::npos);
}

TEST(hf_fetch_turns_every_curl_failure_into_one_reason) {
    struct Case { std::string script; const char* says; };
    const Case cases[] = {
        {"echo 'curl: (6) Could not resolve host: huggingface.co' >&2; exit 6",
         "curl failed with exit code 6 (could not resolve the host: no DNS or no network): curl: (6) Could not resolve host: huggingface.co"},
        {"echo 'curl: (7) Failed to connect to huggingface.co port 443 after 3 ms: Could not connect to server' >&2; exit 7",
         "exit code 7 (could not connect: no network or the host refused): curl: (7) Failed to connect to huggingface.co port 443"},
        {"echo 'curl: (28) Connection timed out after 5001 milliseconds' >&2; exit 28",
         "exit code 28 (timed out): curl: (28) Connection timed out after 5001 milliseconds"},
        {"echo 'curl: (22) The requested URL returned error: 503' >&2; exit 22",
         "exit code 22 (the server answered with an HTTP error status): curl: (22) The requested URL returned error: 503"},
        {"echo 'curl: (60) SSL certificate problem: unable to get local issuer certificate' >&2; exit 60",
         "exit code 60 (the server's TLS certificate could not be verified)"},
        {"printf 'first\\n\\ncurl: (35) OpenSSL error\\n\\n' >&2; exit 35", "(TLS handshake failed): curl: (35) OpenSSL error"},
        {"exit 99", "curl failed with exit code 99"},
        {"kill -9 $$", "curl was killed by signal 9"},
    };
    for (const auto& c : cases) {
        std::string r = fetch_with(fake_curl_dir(c.script));
        if (!CHECK(r.find(c.says) != std::string::npos)) std::printf("    got: %s\n", r.c_str());
        CHECK(r.rfind("ERROR: ", 0) == 0);
        CHECK(r.find('\n') == std::string::npos);
    }
    // Absent: PATH holds only a directory without curl.
    std::string r = fetch_with(bt::temp_dir(), {}, true);
    CHECK_EQ(r, "ERROR: curl not found on PATH (bankml reads the list through curl)");
}

TEST(hf_fetch_kills_curl_past_the_time_limit_and_past_the_byte_cap) {
    hf::FetchOptions quick;
    quick.timeout_s = 0.2;  // bankml's own deadline is 1 s past it
    std::string r = fetch_with(fake_curl_dir("sleep 30"), quick);
    CHECK_EQ(r, "ERROR: curl did not finish within 0.2 s (killed)");
    // A child that closes its output but does not exit is killed too.
    r = fetch_with(fake_curl_dir("exec >/dev/null 2>&1; sleep 30"), quick);
    CHECK_EQ(r, "ERROR: curl did not finish within 0.2 s (killed)");
    hf::FetchOptions small;
    small.max_bytes = 1000;
    r = fetch_with(fake_curl_dir("cat '" + bt::data_path("hf-hardware.json") + "'"), small);
    CHECK_EQ(r, "ERROR: the answer is larger than 1000 bytes (curl killed)");
    r = fetch_with(fake_curl_dir("while :; do echo garbage; done"), small);
    CHECK_EQ(r, "ERROR: the answer is larger than 1000 bytes (curl killed)");
}

TEST(hf_devices_give_the_reason_when_there_are_none) {
    auto reason = [](const std::string& dir) {
        PathFirst p(dir, false);
        try {
            auto d = hf::devices();
            return "devices: " + std::to_string(d.size());
        } catch (const Error& e) {
            return std::string(e.what());
        }
    };
    CHECK_EQ(reason(fake_curl_dir("cat '" + bt::data_path("hf-hardware.json") + "'")), "devices: 14");
    std::string g = reason(fake_curl_dir("echo 'this is not json'"));
    CHECK(g.find("the answer is not JSON (17 bytes; json: at byte 1: expected 'true'") == 0);
    CHECK(g.find(hf::HARDWARE_URL) != std::string::npos);
    CHECK(reason(fake_curl_dir("cat '" + bt::data_path("hf-empty.json") + "'")).find("the answer is an empty list of flavors") == 0);
    // Notes about the list as a whole ride on the first device.
    PathFirst p(fake_curl_dir("cat '" + bt::data_path("hf-odd.json") + "'"), false);
    auto devs = hf::devices();
    REQUIRE(!devs.empty());
    CHECK(has_note(devs.front().notes, "the list: 2 entries of the list are not objects"));
}

TEST(hf_timeout_comes_from_bankml_hf_timeout) {
    auto with = [](const char* v, std::string* note) {
        const char* o = std::getenv("BANKML_HF_TIMEOUT");
        std::string old = o ? o : "";
        if (v) setenv("BANKML_HF_TIMEOUT", v, 1);
        else unsetenv("BANKML_HF_TIMEOUT");
        auto opt = hf::options_from_env(note);
        if (o) setenv("BANKML_HF_TIMEOUT", old.c_str(), 1);
        else unsetenv("BANKML_HF_TIMEOUT");
        return opt;
    };
    std::string note;
    CHECK_EQ(with(nullptr, &note).timeout_s, 20.0);
    CHECK(note.empty());
    auto o = with("0.5", &note);
    CHECK_EQ(o.timeout_s, 0.5);
    CHECK_EQ(o.connect_timeout_s, 0.5);
    CHECK(note.empty());
    CHECK_EQ(with("soon", &note).timeout_s, 20.0);
    CHECK(note.find("BANKML_HF_TIMEOUT='soon'") != std::string::npos);
    note.clear();
    CHECK_EQ(with("0", &note).timeout_s, 20.0);
    CHECK(!note.empty());
}

// ---------------------------------------------------------------------------------------------
// `bankml gpu --remote`: always exit 0, the local report plus the remote devices or the reason.

namespace {
json::Value remote_report(const std::string& env, int* code) {
    auto p = bt::run_cmd(env + " " + bt::bankml_bin() + " gpu --remote");
    *code = p.code;
    json::ParseFailure why;
    auto doc = json::try_parse(p.out, &why);
    if (!doc) {
        bt::fail(__FILE__, __LINE__, "not JSON: " + why.message + "\n" + p.out + p.err);
        return json::Value();
    }
    return *doc;
}

bool notes_have(const json::Value& doc, const std::string& part) {
    for (const auto& n : doc["notes"].as_array())
        if (n.as_string().find(part) != std::string::npos) return true;
    return false;
}
}  // namespace

TEST(hf_bankml_gpu_remote_lists_rented_cards_never_selected_and_exits_0) {
    std::string dir = fake_curl_dir("cat '" + bt::data_path("hf-hardware.json") + "'");
    int code = -1;
    json::Value doc = remote_report("PATH='" + dir + "':\"$PATH\"", &code);
    CHECK_EQ(code, 0);
    size_t remote = 0;
    int64_t h200x8_index = -1;
    for (const auto& d : doc["devices"].as_array()) {
        if (d["kind"].string_or("") != "Remote") continue;
        ++remote;
        CHECK_EQ(d["backend"].as_string(), "huggingface");
        CHECK_EQ(d["selected"].as_bool(), false);
        CHECK_EQ(d["usable"].as_bool(), false);
        CHECK(d["not_usable_because"].as_string().find("rented") != std::string::npos);
        if (d["id"].string_or("") == "h200x8") {
            h200x8_index = d["index"].as_int();
            CHECK_EQ(d["count"].as_int(), 8);
            CHECK_NEAR(d["usd_per_hour"].as_double(), 40.00002, 1e-9);
            CHECK_EQ(d["device_local_bytes"].as_uint(), uint64_t(141e9));
        }
    }
    CHECK_EQ(remote, size_t(14));
    REQUIRE(h200x8_index >= 0);
    for (const auto& s : doc["selected"].as_array()) CHECK_NE(s.as_int(), h200x8_index);
    // Asked for by index, a rented card is still refused.
    json::Value forced = remote_report("BANKML_GPU=" + std::to_string(h200x8_index) + " PATH='" + dir + "':\"$PATH\"", &code);
    CHECK_EQ(code, 0);
    CHECK_EQ(forced["selected"].size(), size_t(0));
    CHECK(notes_have(forced, "rented hardware"));
}

TEST(hf_bankml_gpu_remote_reports_why_there_are_no_rented_cards) {
    struct Case { std::string env; const char* says; };
    std::string fail6 = fake_curl_dir("echo 'curl: (6) Could not resolve host: huggingface.co' >&2; exit 6");
    std::string garbage = fake_curl_dir("head -c 3000 /dev/urandom");
    std::string slow = fake_curl_dir("sleep 30");
    const Case cases[] = {
        {"PATH='" + fail6 + "':\"$PATH\"", "huggingface: curl failed with exit code 6"},
        {"PATH='" + garbage + "':\"$PATH\"", "huggingface: the answer is not JSON (3000 bytes; json: at byte"},
        {"BANKML_HF_TIMEOUT=0.2 PATH='" + slow + "':\"$PATH\"", "huggingface: curl did not finish within 0.2 s (killed)"},
        {"PATH='" + bt::temp_dir() + "'", "huggingface: curl not found on PATH"},
    };
    for (const auto& c : cases) {
        int code = -1;
        json::Value doc = remote_report(c.env, &code);
        CHECK_EQ(code, 0);
        if (!CHECK(notes_have(doc, c.says))) std::printf("    notes: %s\n", json::write(doc["notes"]).c_str());
        for (const auto& d : doc["devices"].as_array()) CHECK_NE(d["kind"].string_or(""), "Remote");
    }
    // Without --remote curl is never run.
    std::string marker = bt::temp_dir() + "/ran";
    std::string spy = fake_curl_dir("touch '" + marker + "'; exit 6");
    auto p = bt::run_cmd("PATH='" + spy + "':\"$PATH\" " + bt::bankml_bin() + " gpu");
    CHECK_EQ(p.code, 0);
    CHECK(!std::ifstream(marker).good());
}
