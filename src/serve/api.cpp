#include "serve/api.h"

#include <climits>
#include <cmath>
#include <cstdint>
#include <random>

#include "model/chat.h"

namespace bankml::serve {

namespace {

[[noreturn]] void bad(const std::string& msg, const std::string& param = "") {
    throw ApiError{400, msg, "invalid_request_error", param};
}

json::Value parse_body(std::string_view body) {
    json::ParseFailure why;
    auto v = json::try_parse(body, &why);
    if (!v) bad("the body is not valid JSON (" + why.message + ")");
    if (!v->is_object()) bad("the body must be a JSON object");
    return std::move(*v);
}

// A present, non-null field, or nullptr.
const json::Value* field(const json::Value& o, const char* key) {
    const json::Value* v = o.find(key);
    return v && !v->is_null() ? v : nullptr;
}

double number(const json::Value& o, const char* key, double dflt, double lo, double hi) {
    const json::Value* v = field(o, key);
    if (!v) return dflt;
    if (!v->is_number()) bad(std::string("'") + key + "' must be a number", key);
    double d = v->as_double();
    if (!(d >= lo && d <= hi))
        bad(std::string("'") + key + "' must be between " + json::write(lo) + " and " + json::write(hi), key);
    return d;
}

int64_t integer(const json::Value& o, const char* key, int64_t dflt, int64_t lo, int64_t hi) {
    const json::Value* v = field(o, key);
    if (!v) return dflt;
    bool whole = v->is_integer() || (v->is_double() && std::isfinite(v->as_double()) &&
                                     v->as_double() == std::floor(v->as_double()) && std::fabs(v->as_double()) < 9e18);
    if (!whole) bad(std::string("'") + key + "' must be an integer", key);
    if (v->type() == json::Type::UInt) bad(std::string("'") + key + "' is out of range", key);
    int64_t i = v->is_integer() ? v->as_int() : int64_t(v->as_double());
    if (i < lo || i > hi)
        bad(std::string("'") + key + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi), key);
    return i;
}

bool boolean(const json::Value& o, const char* key, bool dflt) {
    const json::Value* v = field(o, key);
    if (!v) return dflt;
    if (!v->is_bool()) bad(std::string("'") + key + "' must be true or false", key);
    return v->as_bool();
}

// The fields both endpoints share: sampling, stopping, streaming, and what bankml refuses.
void common(const json::Value& o, const Defaults& d, Completion& c) {
    auto& s = c.sampling;
    s = d.sampling;
    s.temp = float(number(o, "temperature", s.temp, 0.0, 100.0));
    s.top_p = float(number(o, "top_p", s.top_p, 0.0, 1.0));
    s.top_k = int32_t(integer(o, "top_k", s.top_k, 0, INT32_MAX));
    s.min_p = float(number(o, "min_p", s.min_p, 0.0, 1.0));
    s.repeat_penalty = float(number(o, "repeat_penalty", s.repeat_penalty, 1e-6, 1e6));
    s.repeat_last_n = int32_t(integer(o, "repeat_last_n", s.repeat_last_n, 0, INT32_MAX));
    if (field(o, "seed")) {
        // OpenAI's seeds are signed 64-bit: a negative one is taken modulo 2^64.
        s.seed = uint64_t(integer(o, "seed", 0, INT64_MIN, INT64_MAX));
    } else if (!d.seed_given) {
        std::random_device rd;
        s.seed = rd();
    }
    for (const char* k : {"presence_penalty", "frequency_penalty"})
        if (number(o, k, 0.0, -2.0, 2.0) != 0.0)
            bad(std::string("'") + k + "' is not supported (use repeat_penalty, llama.cpp's penalty)", k);
    if (integer(o, "n", 1, 1, 1) != 1) bad("'n' must be 1", "n");
    if (field(o, "logprobs") && (!o["logprobs"].is_bool() || o["logprobs"].as_bool()))
        bad("'logprobs' is not supported", "logprobs");
    if (field(o, "top_logprobs")) bad("'top_logprobs' is not supported", "top_logprobs");
    if (field(o, "logit_bias") && (!o["logit_bias"].is_object() || o["logit_bias"].size()))
        bad("'logit_bias' is not supported", "logit_bias");
    for (const char* k : {"tools", "functions"})
        if (field(o, k) && (!o[k].is_array() || o[k].size())) bad(std::string("'") + k + "' is not supported", k);
    if (const json::Value* rf = field(o, "response_format")) {
        if (!rf->is_object()) bad("'response_format' must be an object", "response_format");
        if ((*rf)["type"].string_or("text") != "text") bad("only the 'text' response format is supported", "response_format");
    }

    int64_t n = d.n_predict;
    for (const char* k : {"max_tokens", "max_completion_tokens", "n_predict"})
        if (field(o, k)) n = integer(o, k, -1, -1, INT32_MAX);
    c.gen.n_predict = int(n);
    if (const json::Value* st = field(o, "stop")) {
        if (st->is_string()) {
            c.gen.stop.push_back(st->as_string());
        } else if (st->is_array()) {
            if (st->size() > 16) bad("'stop' holds at most 16 strings", "stop");
            for (const auto& e : st->as_array()) {
                if (!e.is_string()) bad("'stop' must be a string or an array of strings", "stop");
                c.gen.stop.push_back(e.as_string());
            }
        } else {
            bad("'stop' must be a string or an array of strings", "stop");
        }
        for (const auto& s1 : c.gen.stop)
            if (s1.empty()) bad("'stop' strings must not be empty", "stop");
    }
    c.gen.ignore_eos = boolean(o, "ignore_eos", false);
    c.stream = boolean(o, "stream", false);
    if (const json::Value* so = field(o, "stream_options")) {
        if (!so->is_object()) bad("'stream_options' must be an object", "stream_options");
        c.include_usage = boolean(*so, "include_usage", false);
    }
    c.return_tokens = boolean(o, "return_tokens", false);
    if (const json::Value* m = field(o, "model"); m && !m->is_string()) bad("'model' must be a string", "model");
}

// A message's content: a string, or an array of text parts.
std::string content_text(const json::Value& v, size_t i) {
    std::string where = "messages[" + std::to_string(i) + "].content";
    if (v.is_null()) return "";
    if (v.is_string()) return v.as_string();
    if (!v.is_array()) bad("'" + where + "' must be a string or an array of text parts", "messages");
    std::string out;
    for (const auto& part : v.as_array()) {
        if (!part.is_object() || part["type"].string_or("") != "text" || !part["text"].is_string())
            bad("'" + where + "' parts must be {\"type\":\"text\",\"text\":…} (only text is supported)", "messages");
        out += part["text"].as_string();
    }
    return out;
}

json::Value usage(const model::GenerateResult& r) {
    json::Value u;
    u.set("prompt_tokens", r.n_prompt)
        .set("completion_tokens", r.ids.size())
        .set("total_tokens", size_t(r.n_prompt) + r.ids.size());
    return u;
}

json::Value timings(const model::GenerateResult& r) {
    json::Value t;
    t.set("prompt_n", r.n_prompt)
        .set("prompt_ms", r.prompt_seconds * 1e3)
        .set("prompt_per_second", r.prompt_tps())
        .set("predicted_n", r.ids.size())
        .set("predicted_ms", r.gen_seconds * 1e3)
        .set("predicted_per_second", r.gen_tps());
    return t;
}

json::Value head(const Completion& c, const Meta& m, bool chunk) {
    json::Value o;
    o.set("id", m.id)
        .set("object", c.chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion")
        .set("created", m.created)
        .set("model", m.model)
        .set("system_fingerprint", "bankml");
    return o;
}

std::string event(const json::Value& v) { return "data: " + json::write(v) + "\n\n"; }

}  // namespace

std::string error_json(const ApiError& e) {
    json::Value err;
    err.set("message", e.message).set("type", e.type).set("param", e.param.empty() ? json::Value() : json::Value(e.param));
    err.set("code", nullptr);
    json::Value o;
    o.set("error", std::move(err));
    return json::write(o);
}

const char* finish_reason(model::StopReason r) {
    return r == model::StopReason::Length || r == model::StopReason::ContextFull ? "length" : "stop";
}

Completion parse_chat(std::string_view body, const Defaults& d) {
    json::Value o = parse_body(body);
    Completion c;
    c.chat = true;
    common(o, d, c);
    const json::Value* ms = field(o, "messages");
    if (!ms) bad("'messages' is required", "messages");
    if (!ms->is_array() || ms->size() == 0) bad("'messages' must be a non-empty array", "messages");
    std::vector<model::ChatMessage> msgs;
    for (size_t i = 0; i < ms->size(); ++i) {
        const json::Value& m = (*ms)[i];
        if (!m.is_object()) bad("'messages[" + std::to_string(i) + "]' must be an object", "messages");
        if (!m["role"].is_string()) bad("'messages[" + std::to_string(i) + "].role' must be a string", "messages");
        std::string role = m["role"].as_string();
        if (role == "developer") role = "system";  // the newer name of the same thing
        if (role != "system" && role != "user" && role != "assistant")
            bad("'messages[" + std::to_string(i) + "].role' is '" + role + "': the roles are system, user and assistant",
                "messages");
        msgs.push_back({role, content_text(m["content"], i)});
    }
    bool think = true;
    if (const json::Value* k = field(o, "chat_template_kwargs")) {
        if (!k->is_object()) bad("'chat_template_kwargs' must be an object", "chat_template_kwargs");
        think = boolean(*k, "enable_thinking", true);
    }
    c.prompt = model::chatml_render(msgs, true, think);
    return c;
}

Completion parse_completion(std::string_view body, const Defaults& d) {
    json::Value o = parse_body(body);
    Completion c;
    c.chat = false;
    common(o, d, c);
    const json::Value* p = field(o, "prompt");
    if (!p) bad("'prompt' is required", "prompt");
    if (p->is_string()) c.prompt = p->as_string();
    else if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) c.prompt = (*p)[0].as_string();
    else if (p->is_array() && p->size() > 0 && (*p)[0].is_integer()) {
        for (const auto& t : p->as_array()) {
            if (!t.is_integer() || t.type() == json::Type::UInt || t.as_int() < 0 || t.as_int() > INT32_MAX)
                bad("'prompt' token ids must be non-negative integers", "prompt");
            c.prompt_ids.push_back(int32_t(t.as_int()));
        }
    } else bad("'prompt' must be a string, an array of one string, or an array of token ids", "prompt");
    if (c.prompt.empty() && c.prompt_ids.empty()) bad("'prompt' is empty", "prompt");
    if (boolean(o, "echo", false)) bad("'echo' is not supported", "echo");
    if (field(o, "suffix")) bad("'suffix' is not supported", "suffix");
    if (integer(o, "best_of", 1, 1, 1) != 1) bad("'best_of' must be 1", "best_of");
    return c;
}

// A finished choice's tail: why it stopped, and the token ids where the request asked for them.
static void finish_choice(json::Value& choice, const Completion& c, const model::GenerateResult& r) {
    choice.set("logprobs", nullptr).set("finish_reason", finish_reason(r.reason));
    if (c.return_tokens) {
        json::Value ids = json::Value::array();
        for (int32_t id : r.ids) ids.push(id);
        choice.set("tokens", std::move(ids));
    }
}

std::string completion_json(const Completion& c, const Meta& m, const model::GenerateResult& r) {
    json::Value choice;
    choice.set("index", 0);
    if (c.chat) {
        json::Value msg;
        msg.set("role", "assistant").set("content", r.text);
        choice.set("message", std::move(msg));
    } else {
        choice.set("text", r.text);
    }
    finish_choice(choice, c, r);
    json::Value o = head(c, m, false);
    o.set("choices", json::Value::array().push(std::move(choice)));
    o.set("usage", usage(r)).set("timings", timings(r));
    return json::write(o);
}

std::string chunk_event(const Completion& c, const Meta& m, std::string_view text, bool first) {
    json::Value choice;
    choice.set("index", 0);
    if (c.chat) {
        json::Value delta;
        if (first) delta.set("role", "assistant");
        delta.set("content", text);
        choice.set("delta", std::move(delta));
    } else {
        choice.set("text", text);
    }
    choice.set("logprobs", nullptr).set("finish_reason", nullptr);
    json::Value o = head(c, m, true);
    o.set("choices", json::Value::array().push(std::move(choice)));
    return event(o);
}

std::string final_event(const Completion& c, const Meta& m, const model::GenerateResult& r) {
    json::Value choice;
    choice.set("index", 0);
    if (c.chat) choice.set("delta", json::Value::object());
    else choice.set("text", "");
    finish_choice(choice, c, r);
    json::Value o = head(c, m, true);
    o.set("choices", json::Value::array().push(std::move(choice)));
    o.set("timings", timings(r));
    return event(o);
}

std::string usage_event(const Completion& c, const Meta& m, const model::GenerateResult& r) {
    json::Value o = head(c, m, true);
    o.set("choices", json::Value::array());
    o.set("usage", usage(r));
    return event(o);
}

}  // namespace bankml::serve
