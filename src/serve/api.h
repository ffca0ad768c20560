// The OpenAI API's JSON, read and written: a chat or text completion request becomes a prompt
// (through the Qwen3 chat template for chat), sampler parameters and stopping options; results
// become the API's objects and its streamed chunks. Anything unusable is an ApiError: the HTTP
// status and the OpenAI-style error object's message and type.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/json.h"
#include "model/generate.h"
#include "model/sampler.h"

namespace bankml::serve {

struct ApiError {
    int status;
    std::string message;
    std::string type;
    std::string param;  // the offending field, if one
    ApiError(int s, std::string m, std::string t = "invalid_request_error", std::string p = "")
        : status(s), message(std::move(m)), type(std::move(t)), param(std::move(p)) {}
};

// {"error":{"message":…,"type":…,"param":…,"code":null}}
std::string error_json(const ApiError& e);

// What the request asks for. Sampling defaults are the server's (its command-line flags).
struct Completion {
    bool chat = true;
    std::string prompt;      // the text to tokenize (the rendered conversation, for chat)
    std::vector<int32_t> prompt_ids;  // a completion's prompt given as token ids (then prompt is empty)
    model::SamplerParams sampling;
    model::GenerateOptions gen;
    bool stream = false;
    bool include_usage = false;  // stream_options.include_usage
    bool return_tokens = false;  // bankml's extension: the completion's token ids
};

struct Defaults {
    model::SamplerParams sampling;  // seed: used when seed_given, else each request draws one
    bool seed_given = false;
    int n_predict = -1;
};

// Throws ApiError (400) for malformed JSON, a wrong type, an unknown role or an unsupported option.
Completion parse_chat(std::string_view body, const Defaults& d);
Completion parse_completion(std::string_view body, const Defaults& d);

// "stop" or "length", as the API names finish reasons.
const char* finish_reason(model::StopReason r);

struct Meta {
    std::string id;     // "chatcmpl-…" or "cmpl-…"
    int64_t created;    // unix seconds
    std::string model;  // the served model's name
};

// The whole response object.
std::string completion_json(const Completion& c, const Meta& m, const model::GenerateResult& r);
// Streamed chunks, each as one server-sent event ("data: {…}\n\n").
std::string chunk_event(const Completion& c, const Meta& m, std::string_view text, bool first);
std::string final_event(const Completion& c, const Meta& m, const model::GenerateResult& r);
std::string usage_event(const Completion& c, const Meta& m, const model::GenerateResult& r);

}  // namespace bankml::serve
