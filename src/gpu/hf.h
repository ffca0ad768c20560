// Hugging Face's rented GPUs: the public Jobs hardware list, read through
// the system curl (bankml has no TLS stack of its own), each GPU flavor one Kind::Remote device
// with its card count, memory and price per hour. Listed only with `bankml gpu --remote`; nothing
// is ever rented, started or paid for, and a remote device is never selected.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/gpu.h"

namespace bankml::gpu::hf {

inline constexpr const char* HARDWARE_URL = "https://huggingface.co/api/jobs/hardware";

struct FetchOptions {
    std::string program = "curl";          // looked up on PATH by execvp
    std::string url = HARDWARE_URL;
    double timeout_s = 20;                  // curl's --max-time; bankml kills curl 1 s after it
    double connect_timeout_s = 5;           // curl's --connect-timeout (at most timeout_s)
    size_t max_bytes = size_t(4) << 20;     // a longer answer is refused (and curl killed)
};
// The defaults, with BANKML_HF_TIMEOUT=SECONDS (a number from 0.05 to 600) setting timeout_s.
// A bad value is ignored (the default stays) and named in *note when note is given.
FetchOptions options_from_env(std::string* note = nullptr);

// The argument vector fetch() runs: program, -fsSL, the time limits, --max-filesize, the URL.
std::vector<std::string> curl_argv(const FetchOptions& o);

// Runs curl as a child process (fork and execvp of curl_argv, never a shell; its own process group,
// so a timeout kills anything it started) and returns its standard output. Throws bankml::Error
// saying why there is no answer: "curl not found on PATH", "curl failed with exit code 6 (could not
// resolve the host): curl: (6) Could not resolve host: huggingface.co", "curl did not finish
// within 20 s (killed)", "the answer is larger than 4194304 bytes (curl killed)",
// "curl was killed by signal 9".
std::string fetch(const FetchOptions& o);

// What parse() makes of an answer.
struct Parsed {
    std::vector<Device> devices;     // one Kind::Remote device per GPU flavor, in the API's order
    std::vector<std::string> notes;  // about the document as a whole (not JSON, not an array, ...)
    size_t flavors = 0;              // entries in the array, GPU or not
};

// Parses the API's answer: a JSON array of flavors, each like
//   {"name": "h200x8", "prettyName": "8x Nvidia H200", "cpu": "...", "ram": "...",
//    "accelerator": {"type": "gpu", "model": "H200", "quantity": "8", "vram": "1128 GB",
//                    "manufacturer": "Nvidia"},
//    "unitCostMicroUSD": 383333, "unitCostUSD": 0.383333, "unitLabel": "minute"}
// CPU flavors ("accelerator": null) are counted, not listed. A GPU flavor becomes one device:
// name = prettyName, id = the flavor's name, count = quantity (h200x8 is ONE device with count 8),
// device_local_bytes = memory PER CARD (the API's vram is the flavor's total: "1128 GB" for 8 x 141
// GB; GB read as 1e9 bytes), usd_per_hour = the per-minute price x 60 (unitCostMicroUSD when present,
// else unitCostUSD) only when unitLabel is "minute". The device's notes give the flavor's total
// memory and every needed field that was missing or odd (and what was assumed instead). Never
// throws: a document that is not JSON or not an array is one note (with the byte offset).
Parsed parse(std::string_view text);

// The remote backend (REMOTE_BACKENDS' "huggingface"): fetch(options_from_env()) then parse().
// Throws bankml::Error with the reason when there is no device (the registry makes it a note);
// notes about the document as a whole go to the first device's notes when there are devices.
std::vector<Device> devices();
std::vector<Device> devices_with(const FetchOptions& o);

// "1128 GB" -> 1128e9; accepts B, KB, MB, GB, TB (powers of 1000), KiB, MiB, GiB, TiB (of 1024),
// any case, a decimal number, spaces around. False for anything else.
bool parse_size(std::string_view s, uint64_t& bytes);

}  // namespace bankml::gpu::hf
