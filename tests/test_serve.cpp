// `bankml serve` over loopback on the tiny models: the HTTP reader, the API's validation, every
// endpoint, greedy tokens against llama.cpp's, tokens independent of the load, streaming, a client
// that leaves, SIGTERM, the API key, the limits, and random or truncated requests.
#include <atomic>
#include <chrono>
#include <csignal>
#include <fstream>
#include <random>
#include <sstream>
#include <poll.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

#include "core/json.h"
#include "model/forward.h"
#include "model/tokenizer.h"
#include "net/http.h"
#include "serve/api.h"
#include "serve/engine.h"
#include "serve/server.h"
#include "serve_proc.h"
#include "test.h"

using namespace bankml;
using bt::ServeProc;

namespace {

std::string tiny() { return bt::data_path("tiny-q1_0.gguf"); }

std::vector<int32_t> ints(const json::Value& a) {
    std::vector<int32_t> v;
    for (const auto& x : a.as_array()) v.push_back(int32_t(x.as_int()));
    return v;
}

// The completion's token ids (bankml's return_tokens extension), empty on any failure.
std::vector<int32_t> tokens_of(const ServeProc& s, const std::string& path, const std::string& body) {
    int st = 0;
    json::Value r = s.post_json(path, body, &st);
    if (st != 200 || !r["choices"][0]["tokens"].is_array()) return {};
    return ints(r["choices"][0]["tokens"]);
}

int code(const std::optional<net::Response>& r) { return r ? r->status : 0; }

json::Value usage(const ServeProc& s) {
    auto r = s.get("/bankml/usage");
    if (!r || r->status != 200) return nullptr;
    auto v = json::try_parse(r->body);
    return v ? *v : json::Value();
}

}  // namespace

TEST(serve_http_head_parser_takes_valid_heads_and_names_what_is_wrong) {
    net::Request r;
    CHECK_EQ(net::parse_head("GET /v1/models?x=1 HTTP/1.1\r\nHost: a\r\nX-Thing:  v v \r\n", r), "");
    CHECK_EQ(r.method, "GET");
    CHECK_EQ(r.path, "/v1/models");
    CHECK_EQ(r.target, "/v1/models?x=1");
    REQUIRE(r.header("x-thing"));
    CHECK_EQ(*r.header("x-thing"), "v v");
    CHECK(r.keep_alive);
    CHECK_EQ(net::parse_head("GET / HTTP/1.1\r\nConnection: close", r), "");
    CHECK(!r.keep_alive);
    CHECK_EQ(net::parse_head("GET / HTTP/1.0", r), "");
    CHECK(!r.keep_alive);
    CHECK_EQ(net::parse_head("GET / HTTP/1.0\r\nConnection: keep-alive", r), "");
    CHECK(r.keep_alive);
    CHECK_EQ(net::parse_head("GET /", r), "malformed request line");
    CHECK_EQ(net::parse_head("GET / HTTP/2.0", r), "unsupported version 'HTTP/2.0'");
    CHECK_EQ(net::parse_head("GET x HTTP/1.1", r), "the target must start with '/'");
    CHECK_EQ(net::parse_head("G(T / HTTP/1.1", r), "malformed method");
    CHECK_EQ(net::parse_head("GET / HTTP/1.1\r\nNoColon", r), "malformed header line");
    CHECK_EQ(net::parse_head("GET / HTTP/1.1\r\nA: b\r\n folded", r), "obsolete header folding");
    CHECK_EQ(net::parse_head("GET / HTTP/1.1\r\nA: b\x01", r), "control character in a header value");
}

TEST(serve_api_reads_requests_and_refuses_bad_ones_with_openai_errors) {
    serve::Defaults d;
    d.sampling.temp = 0.5f;
    auto c = serve::parse_chat(
        R"({"model":"x","messages":[{"role":"system","content":"S"},{"role":"user","content":[{"type":"text","text":"hi"}]}],)"
        R"("max_tokens":7,"temperature":0,"top_k":3,"seed":-1,"stop":["a","b"],"stream":true,"stream_options":{"include_usage":true},)"
        R"("presence_penalty":0,"n":1})",
        d);
    CHECK_EQ(c.prompt, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    CHECK_EQ(c.gen.n_predict, 7);
    CHECK_EQ(c.sampling.temp, 0.0f);
    CHECK_EQ(c.sampling.top_k, 3);
    CHECK_EQ(c.sampling.seed, UINT64_MAX);
    CHECK_EQ(c.gen.stop.size(), 2u);
    CHECK(c.stream && c.include_usage);
    auto nt = serve::parse_chat(R"({"messages":[{"role":"user","content":"q"}],"chat_template_kwargs":{"enable_thinking":false}})", d);
    CHECK(nt.prompt.find("<think>\n\n</think>\n\n") != std::string::npos);
    CHECK_EQ(nt.sampling.temp, 0.5f);  // the server's default

    auto refused = [&](const std::string& body, const std::string& words, bool chat = true) {
        try {
            if (chat) serve::parse_chat(body, d);
            else serve::parse_completion(body, d);
        } catch (const serve::ApiError& e) {
            bool ok = e.status == 400 && e.message.find(words) != std::string::npos;
            if (!ok) bt::fail(__FILE__, __LINE__, body + " -> " + e.message);
            auto j = json::parse(serve::error_json(e));
            CHECK(j["error"]["message"].is_string());
            CHECK_EQ(j["error"]["type"].as_string(), "invalid_request_error");
            return;
        }
        bt::fail(__FILE__, __LINE__, "accepted: " + body);
    };
    refused("{", "not valid JSON");
    refused("[1]", "must be a JSON object");
    refused("{}", "'messages' is required");
    refused(R"({"messages":[]})", "non-empty array");
    refused(R"({"messages":[{"role":"robot","content":"x"}]})", "the roles are system, user and assistant");
    refused(R"({"messages":[{"role":1,"content":"x"}]})", "role' must be a string");
    refused(R"({"messages":[{"role":"user","content":5}]})", "must be a string or an array of text parts");
    refused(R"({"messages":[{"role":"user","content":"x"}],"max_tokens":"9"})", "'max_tokens' must be an integer");
    refused(R"({"messages":[{"role":"user","content":"x"}],"max_tokens":1.5})", "'max_tokens' must be an integer");
    refused(R"({"messages":[{"role":"user","content":"x"}],"temperature":"hot"})", "'temperature' must be a number");
    refused(R"({"messages":[{"role":"user","content":"x"}],"top_p":2})", "'top_p' must be between");
    refused(R"({"messages":[{"role":"user","content":"x"}],"presence_penalty":0.5})", "not supported");
    refused(R"({"messages":[{"role":"user","content":"x"}],"frequency_penalty":1})", "not supported");
    refused(R"({"messages":[{"role":"user","content":"x"}],"n":2})", "'n' must be");
    refused(R"({"messages":[{"role":"user","content":"x"}],"stop":[1]})", "'stop' must be");
    refused(R"({"messages":[{"role":"user","content":"x"}],"stream":"yes"})", "'stream' must be true or false");
    refused(R"({"messages":[{"role":"user","content":"x"}],"tools":[{}]})", "'tools' is not supported");
    refused(R"({"prompt":5})", "'prompt' must be", false);
    refused(R"({"prompt":[1,-2]})", "non-negative", false);
    refused(R"({"prompt":""})", "'prompt' is empty", false);
    auto ids = serve::parse_completion(R"({"prompt":[1,2,3]})", d);
    CHECK_EQ(ids.prompt_ids.size(), 3u);
}

TEST(serve_health_is_503_while_loading_then_200) {
    serve::ServerOptions so;
    so.port = 0;
    so.model_name = "tiny";
    serve::Server server(so);
    std::atomic<bool> stop{false};
    std::thread t([&] { server.run(stop); });
    auto h = net::request("127.0.0.1", server.port(), "GET", "/health", "", "", 5000);
    REQUIRE(h);
    CHECK_EQ(h->status, 503);
    CHECK(json::parse(h->body)["error"]["message"].is_string());
    auto m = net::request("127.0.0.1", server.port(), "POST", "/v1/chat/completions", "{}", "", 5000);
    REQUIRE(m);
    CHECK_EQ(m->status, 503);
    model::ModelOptions mo;
    mo.threads = 1;
    std::vector<std::unique_ptr<model::Model>> models;
    models.push_back(model::Model::open(tiny(), mo));
    auto tok = model::Tokenizer::from_gguf(models[0]->file());
    serve::Engine eng(std::move(models), tok);
    server.set_ready(&eng, nullptr);
    h = net::request("127.0.0.1", server.port(), "GET", "/health", "", "", 5000);
    REQUIRE(h);
    CHECK_EQ(h->status, 200);
    stop = true;
    t.join();
    eng.stop();
}

TEST(serve_endpoints_answer_over_loopback) {
    ServeProc s({"-m", tiny(), "-t", "1", "-c", "256"});
    REQUIRE(s.ok());
    auto models = s.get("/v1/models");
    REQUIRE(models);
    CHECK_EQ(models->status, 200);
    auto mj = json::parse(models->body);
    CHECK_EQ(mj["data"][0]["id"].as_string(), "tiny-q1_0");
    CHECK_EQ(mj["data"][0]["meta"]["n_ctx"].as_int(), 256);

    int st = 0;
    auto chat = s.post_json("/v1/chat/completions",
                            R"({"messages":[{"role":"user","content":"hello"}],"max_tokens":9,"temperature":0})", &st);
    CHECK_EQ(st, 200);
    CHECK_EQ(chat["object"].as_string(), "chat.completion");
    CHECK_EQ(chat["choices"][0]["message"]["role"].as_string(), "assistant");
    CHECK(chat["choices"][0]["message"]["content"].is_string());
    CHECK_EQ(chat["choices"][0]["finish_reason"].as_string(), "length");
    CHECK_EQ(chat["usage"]["completion_tokens"].as_int(), 9);
    // "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n" in the tiny vocabulary.
    CHECK_GT(chat["usage"]["prompt_tokens"].as_int(), 5);
    CHECK_EQ(chat["usage"]["total_tokens"].as_int(),
             chat["usage"]["prompt_tokens"].as_int() + chat["usage"]["completion_tokens"].as_int());

    auto cmpl = s.post_json("/v1/completions", R"({"prompt":"abc","max_tokens":5,"temperature":0})", &st);
    CHECK_EQ(st, 200);
    CHECK_EQ(cmpl["object"].as_string(), "text_completion");
    CHECK(cmpl["choices"][0]["text"].is_string());
    CHECK_EQ(cmpl["usage"]["completion_tokens"].as_int(), 5);

    // A stop string ends the answer before it (greedy, so the string is known in advance).
    std::string full = chat["choices"][0]["message"]["content"].as_string();
    if (full.size() > 4) {
        json::Value req = json::parse(R"({"messages":[{"role":"user","content":"hello"}],"max_tokens":9,"temperature":0})");
        req.set("stop", full.substr(full.size() / 2, 3));
        auto stopped = s.post_json("/v1/chat/completions", json::write(req), &st);
        CHECK_EQ(st, 200);
        CHECK_EQ(stopped["choices"][0]["finish_reason"].as_string(), "stop");
        CHECK_EQ(stopped["choices"][0]["message"]["content"].as_string(), full.substr(0, full.find(full.substr(full.size() / 2, 3))));
    }

    auto nf = s.get("/v1/nothing");
    REQUIRE(nf);
    CHECK_EQ(nf->status, 404);
    CHECK(json::parse(nf->body)["error"]["message"].is_string());
    // HEAD: the headers of GET, no body (the next request on a kept-alive connection stays intact).
    auto hd = net::request("127.0.0.1", s.port(), "HEAD", "/health", "", "", 5000);
    REQUIRE(hd);
    CHECK_EQ(hd->status, 200);
    CHECK(hd->body.empty());
    REQUIRE(hd->header("content-length"));
    CHECK_EQ(*hd->header("content-length"), "15");
    auto wm = s.get("/v1/chat/completions");
    REQUIRE(wm);
    CHECK_EQ(wm->status, 405);
    auto bad = s.post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],"temperature":"hot"})");
    REQUIRE(bad);
    CHECK_EQ(bad->status, 400);
    CHECK_EQ(json::parse(bad->body)["error"]["type"].as_string(), "invalid_request_error");
    // A prompt longer than the context (256 tokens): 400, the server goes on.
    std::string long_prompt(3000, 'q');
    auto too_long = s.post("/v1/completions", R"({"prompt":")" + long_prompt + R"(","max_tokens":1})");
    REQUIRE(too_long);
    CHECK_EQ(too_long->status, 400);
    CHECK(too_long->body.find("context") != std::string::npos);
    auto oov = s.post("/v1/completions", R"({"prompt":[1,2,99999]})");
    REQUIRE(oov);
    CHECK_EQ(oov->status, 400);

    auto page = s.get("/");
    REQUIRE(page);
    CHECK_EQ(page->status, 200);
    CHECK(page->body.find("<html") != std::string::npos || page->body.find("<!doctype") != std::string::npos);

    json::Value u = usage(s);
    CHECK_EQ(u["engine"]["requests"].as_int(), 2 + (full.size() > 4 ? 1 : 0));
    CHECK_GE(u["engine"]["tokens_out"].as_int(), 14);
    CHECK_EQ(u["engine"]["slots"].as_int(), 1);
    CHECK_EQ(u["engine"]["queue"].as_int(), 0);
    CHECK(u["gpu"].is_null() || u["gpu"]["device"].is_string());
    CHECK(u.contains("gpu_limiter"));  // gpu::status(): null without a card
    CHECK(u["gpu_limiter"].is_null() || u["gpu_limiter"]["limit"].is_number());
    auto m = s.get("/metrics");
    REQUIRE(m);
    CHECK_EQ(m->status, 200);
    CHECK(m->body.find("\nbankml_completion_tokens_total " + std::to_string(u["engine"]["tokens_out"].as_int()) + "\n") !=
          std::string::npos);
    CHECK(m->body.find("# TYPE bankml_slots_busy gauge\n") != std::string::npos);
    // One slot: every step holds one sequence; the steps ran every prompt token and every decoded
    // token (each answer's tokens but its last).
    CHECK_EQ(u["engine"]["max_batch"].as_int(), 1);
    CHECK_EQ(u["engine"]["step_tokens"].as_int(),
             u["engine"]["tokens_in"].as_int() + u["engine"]["tokens_out"].as_int() - u["engine"]["requests"].as_int());
    CHECK(m->body.find("\nbankml_steps_total " + std::to_string(u["engine"]["steps"].as_int()) + "\n") !=
          std::string::npos);
    int rc = s.stop();
    CHECK_EQ(rc, 0);
}

TEST(serve_greedy_completion_gives_llama_cpp_tokens) {
    // tiny-greedy.txt: llama.cpp's greedy continuation of token-id prompts.
    std::ifstream f(bt::data_path("tiny-greedy.txt"));
    std::string line, model;
    std::vector<std::pair<std::string, std::string>> cases;  // prompt ids, greedy ids (tiny-q1_0)
    std::string prompt;
    while (std::getline(f, line)) {
        if (line.rfind("model ", 0) == 0) model = line.substr(6);
        else if (line.rfind("prompt ", 0) == 0) prompt = line.substr(7);
        else if (line.rfind("greedy ", 0) == 0 && model == "tiny-q1_0.gguf") cases.emplace_back(prompt, line.substr(7));
    }
    REQUIRE_EQ(cases.size(), 2u);
    ServeProc s({"-m", tiny(), "-t", "2", "-c", "512"});
    REQUIRE(s.ok());
    for (auto& [p, g] : cases) {
        std::vector<int32_t> want;
        std::istringstream gs(g);
        for (int32_t id; gs >> id;) want.push_back(id);
        std::string ids;
        std::istringstream ps(p);
        for (int32_t id; ps >> id;) ids += (ids.empty() ? "" : ",") + std::to_string(id);
        auto got = tokens_of(s, "/v1/completions",
                             R"({"prompt":[)" + ids + R"(],"temperature":0,"ignore_eos":true,"return_tokens":true,"max_tokens":)" +
                                 std::to_string(want.size()) + "}");
        CHECK(got == want);
    }
}

TEST(serve_tokens_do_not_depend_on_other_requests) {
    ServeProc s({"-m", tiny(), "--parallel", "4", "-t", "2", "-c", "1024"});
    REQUIRE(s.ok());
    const std::vector<std::string> reqs = {
        R"({"prompt":[17,300,5,999,42],"temperature":0.9,"seed":7,"ignore_eos":true,"max_tokens":500,"return_tokens":true})",
        R"({"prompt":"the same request","temperature":0,"ignore_eos":true,"max_tokens":500,"return_tokens":true})",
        R"({"prompt":[1,2,3,4,5,6,7,8],"temperature":1.2,"top_k":0,"seed":123,"ignore_eos":true,"max_tokens":600,"return_tokens":true})",
        R"({"prompt":"another one, longer than the others so the prompts differ","temperature":0.7,"seed":99,"ignore_eos":true,"max_tokens":600,"return_tokens":true})",
    };
    std::vector<std::vector<int32_t>> alone;
    for (const auto& r : reqs) {
        alone.push_back(tokens_of(s, "/v1/completions", r));
        CHECK_GE(alone.back().size(), 500u);
    }
    // All four at once, twice, with a watcher that records how many slots were busy together.
    std::atomic<bool> running{true};
    int most_busy = 0;
    std::thread watch([&] {
        auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (running && std::chrono::steady_clock::now() < end) {
            json::Value u = usage(s);
            if (u["engine"]["slots_busy"].is_integer()) most_busy = std::max(most_busy, int(u["engine"]["slots_busy"].as_int()));
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
    });
    for (int round = 0; round < 2; ++round) {
        std::vector<std::vector<int32_t>> together(reqs.size());
        std::vector<std::thread> ts;
        for (size_t i = 0; i < reqs.size(); ++i)
            ts.emplace_back([&, i] { together[i] = tokens_of(s, "/v1/completions", reqs[i]); });
        for (auto& t : ts) t.join();
        for (size_t i = 0; i < reqs.size(); ++i) CHECK(together[i] == alone[i]);
    }
    running = false;
    watch.join();
    CHECK_GE(most_busy, 2);
    // The same chat request through a one-slot server gives the same tokens too.
    ServeProc one({"-m", tiny(), "-t", "1", "-c", "1024"});
    REQUIRE(one.ok());
    CHECK(tokens_of(one, "/v1/completions", reqs[0]) == alone[0]);
}

// The batched decode step with slots at different positions: prompts of 3 to 150 tokens, answers
// of 60 to 400, and a fourth request that joins when the shortest leaves, while the others are
// deep into theirs. Each gets the tokens it gets alone, and the server's counters show decode
// steps that held several slots' tokens at once.
TEST(serve_batched_decode_of_slots_at_different_positions_keeps_each_requests_tokens) {
    ServeProc s({"-m", tiny(), "--parallel", "3", "-t", "2", "-c", "1024"});
    REQUIRE(s.ok());
    auto ids = [](int n, int from) {
        std::string r;
        for (int i = 0; i < n; ++i) r += (i ? "," : "") + std::to_string((from + 37 * i) % 1000);
        return r;
    };
    auto req = [&](int prompt, int from, int max_tokens, const std::string& sampling) {
        return R"({"prompt":[)" + ids(prompt, from) + R"(],"ignore_eos":true,"return_tokens":true,"max_tokens":)" +
               std::to_string(max_tokens) + "," + sampling + "}";
    };
    const std::vector<std::string> reqs = {
        req(3, 11, 400, R"("temperature":0.8,"seed":3)"),
        req(60, 200, 60, R"("temperature":0)"),
        req(150, 500, 250, R"("temperature":1.1,"top_k":0,"seed":77)"),
        req(20, 900, 120, R"("temperature":0.6,"top_p":0.9,"seed":5)"),  // joins when the second leaves
    };
    std::vector<std::vector<int32_t>> alone;
    for (const auto& r : reqs) alone.push_back(tokens_of(s, "/v1/completions", r));
    const json::Value before = usage(s);
    std::vector<std::vector<int32_t>> together(reqs.size());
    std::thread a([&] { together[0] = tokens_of(s, "/v1/completions", reqs[0]); });
    std::thread b([&] {
        together[1] = tokens_of(s, "/v1/completions", reqs[1]);
        together[3] = tokens_of(s, "/v1/completions", reqs[3]);
    });
    std::thread c([&] { together[2] = tokens_of(s, "/v1/completions", reqs[2]); });
    a.join();
    b.join();
    c.join();
    const std::vector<size_t> lengths = {400, 60, 250, 120};
    for (size_t i = 0; i < reqs.size(); ++i) {
        CHECK_EQ(alone[i].size(), lengths[i]);
        CHECK(together[i] == alone[i]);
    }
    const json::Value after = usage(s);
    const int64_t steps = after["engine"]["steps"].as_int() - before["engine"]["steps"].as_int();
    const int64_t toks = after["engine"]["step_tokens"].as_int() - before["engine"]["step_tokens"].as_int();
    // 233 prompt tokens and 826 decoded ones (each answer's tokens but its last), in little more
    // steps than the longest answer has tokens when batched (1,059 or more one at a time).
    CHECK_EQ(toks, 233 + 826);
    CHECK_LT(steps, 600);
    CHECK_GE(after["engine"]["max_batch"].as_int(), 3);
}

TEST(serve_stream_sends_the_same_text_as_sse_ending_in_done) {
    ServeProc s({"-m", tiny(), "-t", "1", "-c", "256"});
    REQUIRE(s.ok());
    const std::string body = R"({"messages":[{"role":"user","content":"tell me"}],"max_tokens":30,"temperature":0.8,"seed":5)";
    int st = 0;
    auto whole = s.post_json("/v1/chat/completions", body + "}", &st);
    REQUIRE_EQ(st, 200);
    int n_events = 0;
    auto r = net::request("127.0.0.1", s.port(), "POST", "/v1/chat/completions",
                          body + R"(,"stream":true,"stream_options":{"include_usage":true}})", "", 30000,
                          [&](std::string_view) { n_events++; });
    REQUIRE(r);
    CHECK_EQ(r->status, 200);
    REQUIRE(r->header("content-type"));
    CHECK_EQ(*r->header("content-type"), "text/event-stream");
    REQUIRE(r->header("transfer-encoding"));
    auto ev = bt::sse_data(r->body);
    REQUIRE(ev.size() >= 4);
    CHECK_EQ(ev.back(), "[DONE]");
    auto first = json::parse(ev[0]);
    CHECK_EQ(first["object"].as_string(), "chat.completion.chunk");
    CHECK_EQ(first["choices"][0]["delta"]["role"].as_string(), "assistant");
    std::string text;
    std::string finish;
    json::Value usage_chunk;
    for (size_t i = 0; i + 1 < ev.size(); ++i) {
        auto j = json::parse(ev[i]);
        if (j["usage"].is_object()) usage_chunk = j["usage"];
        if (j["choices"].size() == 0) continue;
        text += j["choices"][0]["delta"]["content"].string_or("");
        if (j["choices"][0]["finish_reason"].is_string()) finish = j["choices"][0]["finish_reason"].as_string();
    }
    CHECK_EQ(text, whole["choices"][0]["message"]["content"].as_string());
    CHECK_EQ(finish, whole["choices"][0]["finish_reason"].as_string());
    CHECK_EQ(usage_chunk["completion_tokens"].as_int(), whole["usage"]["completion_tokens"].as_int());
    CHECK_GT(n_events, 1);  // it arrived in pieces
    // Text completions stream too.
    auto tc = s.post("/v1/completions", R"({"prompt":"abc","max_tokens":6,"stream":true})");
    REQUIRE(tc);
    auto tev = bt::sse_data(tc->body);
    REQUIRE(!tev.empty());
    CHECK_EQ(tev.back(), "[DONE]");
    CHECK_EQ(json::parse(tev[0])["object"].as_string(), "text_completion");
}

TEST(serve_a_client_that_leaves_frees_its_slot) {
    ServeProc s({"-m", tiny(), "-t", "1", "-c", "4096"});
    REQUIRE(s.ok());
    auto slots_busy = [&] {
        json::Value u = usage(s);
        return u["engine"]["slots_busy"].is_integer() ? u["engine"]["slots_busy"].as_int() : -1;
    };
    for (bool stream : {true, false}) {
        // The slot idle first: the last request's answer can arrive before its slot is counted free,
        // and a busy slot must be this request's.
        for (auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10); slots_busy() != 0 && std::chrono::steady_clock::now() < end;)
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        int fd = net::connect_tcp("127.0.0.1", s.port(), 5000);
        REQUIRE(fd >= 0);
        std::string body = std::string(R"({"prompt":"x","ignore_eos":true,"max_tokens":4000,"stream":)") +
                           (stream ? "true" : "false") + "}";
        std::string req = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) +
                          "\r\n\r\n" + body;
        REQUIRE(::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == ssize_t(req.size()));
        // Wait until the slot is busy (streaming: until the first event), then leave.
        auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        bool busy = false;
        while (!busy && std::chrono::steady_clock::now() < end) busy = slots_busy() == 1;
        CHECK(busy);
        ::close(fd);
        // The one slot is free again well before 4000 tokens could be generated.
        auto t0 = std::chrono::steady_clock::now();
        int st = 0;
        s.post_json("/v1/completions", R"({"prompt":"y","max_tokens":3})", &st);
        CHECK_EQ(st, 200);
        CHECK_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
    }
    json::Value u = usage(s);
    CHECK_EQ(u["engine"]["cancelled"].as_int(), 2);
    CHECK_LT(u["engine"]["tokens_out"].as_int(), 2 * 4000);
}

TEST(serve_sigterm_finishes_the_answer_in_flight_then_exits_0) {
    ServeProc s({"-m", tiny(), "-t", "1", "-c", "2048"});
    REQUIRE(s.ok());
    int st = 0;
    json::Value r;
    std::thread t([&] { r = s.post_json("/v1/completions", R"({"prompt":"x","ignore_eos":true,"max_tokens":1500})", &st); });
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    bool busy = false;
    while (!busy && std::chrono::steady_clock::now() < end) {
        json::Value u = usage(s);
        busy = u["engine"]["slots_busy"].is_integer() && u["engine"]["slots_busy"].as_int() == 1;
    }
    CHECK(busy);
    ::kill(s.pid(), SIGTERM);
    t.join();
    CHECK_EQ(st, 200);
    CHECK_EQ(r["usage"]["completion_tokens"].as_int(), 1500);
    int rc = s.stop();
    CHECK_EQ(rc, 0);
    CHECK(s.err().find("bankml serve: stopped") != std::string::npos);
}

TEST(serve_api_key_guards_every_endpoint_but_health) {
    ServeProc s({"-m", tiny(), "-t", "1", "--api-key", "s3cret"});
    REQUIRE(s.ok());
    CHECK_EQ(code(s.get("/health")), 200);
    for (const char* p : {"/v1/models", "/bankml/usage", "/metrics"}) {
        CHECK_EQ(code(s.get(p)), 401);
        CHECK_EQ(code(s.get(p, "Authorization: Bearer s3cre\r\n")), 401);
        CHECK_EQ(code(s.get(p, "Authorization: Bearer s3cret!\r\n")), 401);
        CHECK_EQ(code(s.get(p, "Authorization: Bearer s3cret\r\n")), 200);
    }
    auto r = s.post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],"max_tokens":2})");
    REQUIRE(r);
    CHECK_EQ(r->status, 401);
    CHECK_EQ(json::parse(r->body)["error"]["type"].as_string(), "authentication_error");
    r = s.post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],"max_tokens":2})",
               "Authorization: Bearer s3cret\r\n");
    REQUIRE(r);
    CHECK_EQ(r->status, 200);
}

TEST(serve_limits_on_head_body_and_connections) {
    ServeProc s({"-m", tiny(), "-t", "1", "--max-body", "2048", "--max-conns", "4"});
    REQUIRE(s.ok());
    auto big = s.post("/v1/completions", R"({"prompt":")" + std::string(5000, 'a') + R"("})");
    REQUIRE(big);
    CHECK_EQ(big->status, 413);
    auto head = s.get("/health", "X-Big: " + std::string(20000, 'h') + "\r\n");
    REQUIRE(head);
    CHECK_EQ(head->status, 431);
    // Four idle connections fill the server; the fifth gets 503; closing them frees the places.
    // The server counts a connection from its accept until its thread ends, a moment after the
    // client closed it (longer on a loaded machine): an idle connection that came while an earlier
    // one still counted was refused (answered 503 and closed: readable here). Replace those and
    // ask again until the server says full, for at most 10 s.
    std::vector<int> fds(4, -1);
    std::optional<net::Response> full;
    for (int i = 0; i < 200; ++i) {
        for (int& fd : fds) {
            if (fd >= 0) {
                pollfd p{fd, POLLIN, 0};
                if (::poll(&p, 1, 0) == 0) continue;  // still idle and counted
                ::close(fd);
            }
            fd = net::connect_tcp("127.0.0.1", s.port(), 5000);
            CHECK(fd >= 0);
        }
        full = s.get("/health");
        if (!full || full->status == 503) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    REQUIRE(full);
    if (!CHECK_EQ(full->status, 503)) {
        auto u = s.get("/bankml/usage");
        std::fprintf(stderr, "    usage: %s\n", u ? u->body.c_str() : "(no answer)");
    }
    for (int fd : fds) ::close(fd);
    bool back = false;
    for (int i = 0; i < 500 && !back; ++i) {  // at most 10 s
        auto h = s.get("/health");
        back = h && h->status == 200;
        if (!back) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    CHECK(back);
}

TEST(serve_survives_random_and_truncated_requests) {
    ServeProc s({"-m", tiny(), "-t", "1", "-c", "128"});
    REQUIRE(s.ok());
    const std::string good_body = R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":3,"temperature":0.5,"seed":1})";
    const std::string good = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                             std::to_string(good_body.size()) + "\r\n\r\n" + good_body;
    std::mt19937 rng(20260801);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    int sent = 0;
    for (int i = 0; i < 300 && std::chrono::steady_clock::now() < deadline; ++i) {
        std::string msg;
        switch (i % 4) {
            case 0:  // random bytes
                for (int k = int(rng() % 300); k > 0; --k) msg += char(rng());
                break;
            case 1:  // a valid request cut anywhere
                msg = good.substr(0, rng() % good.size());
                break;
            case 2: {  // a valid head with a corrupted body (same length)
                msg = good;
                for (int k = 1 + int(rng() % 4); k > 0; --k) msg[good.size() - good_body.size() + rng() % good_body.size()] = char(rng());
                break;
            }
            case 3: {  // random JSON-ish bodies with a correct length
                static const char* parts[] = {"{", "}", "[", "]", "\"messages\"", ":", ",", "\"role\"", "\"user\"", "null",
                                              "1e999", "-1", "\"\\ud800\"", "\"max_tokens\"", "\"stream\"", "true", "\"content\""};
                std::string b;
                for (int k = int(rng() % 20); k > 0; --k) b += parts[rng() % (sizeof parts / sizeof *parts)];
                msg = "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: " + std::to_string(b.size()) + "\r\n\r\n" + b;
                break;
            }
        }
        int fd = net::connect_tcp("127.0.0.1", s.port(), 2000);
        REQUIRE(fd >= 0);
        ::send(fd, msg.data(), msg.size(), MSG_NOSIGNAL);
        ::shutdown(fd, SHUT_WR);
        // Read whatever comes back, for at most 2 s.
        pollfd p{fd, POLLIN, 0};
        char buf[4096];
        auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
        while (std::chrono::steady_clock::now() < end && ::poll(&p, 1, 200) >= 0) {
            if (!(p.revents & POLLIN)) continue;
            if (::recv(fd, buf, sizeof buf, 0) <= 0) break;
        }
        ::close(fd);
        sent++;
    }
    CHECK_GE(sent, 100);
    auto h = s.get("/health");
    REQUIRE(h);
    CHECK_EQ(h->status, 200);
    int st = 0;
    s.post_json("/v1/chat/completions", good_body, &st);
    CHECK_EQ(st, 200);
    int rc = s.stop();
    CHECK_EQ(rc, 0);
}

// Real clients: the official openai npm package and the chat page in headless Chromium. .ci/run
// installs Node, Chromium and tests/node's packages; a machine without them skips with the reason.
static std::string node_dir() { return bt::data_path("../node"); }

static void need_node() {
    if (bt::run_cmd("node --version").code != 0) SKIP("node", "node is not installed (.ci/run installs it)");
    if (bt::run_cmd("test -d '" + node_dir() + "/node_modules/openai'").code != 0)
        SKIP("node", "tests/node has no node_modules (.ci/run runs npm ci there)");
}

TEST(serve_openai_npm_client_streams_a_chat_completion) {
    need_node();
    ServeProc s({"-m", tiny(), "-t", "1", "-c", "512", "--api-key", "node-key"});
    REQUIRE(s.ok());
    auto p = bt::run_cmd("timeout 60 node '" + node_dir() + "/openai_stream.mjs' " + std::to_string(s.port()) + " node-key");
    if (p.code != 0) bt::fail(__FILE__, __LINE__, "node openai_stream.mjs: " + p.out + p.err);
    CHECK_EQ(p.code, 0);
    auto j = json::try_parse(p.out);
    REQUIRE(j);
    CHECK_EQ((*j)["model"].as_string(), "tiny-q1_0");
    CHECK_EQ((*j)["stream_text"].as_string(), (*j)["whole_text"].as_string());
}

TEST(serve_chat_page_streams_a_reply_in_headless_chromium) {
    // Under the sanitizers the page's model streams too slowly for the browser's waits; the plain
    // build runs this test, and every endpoint it uses is tested under the sanitizers above.
    if (const char* a = std::getenv("BANKML_ASAN"); a && std::string(a) == "1")
        throw bt::Skipped{"non-asan-build", "the page's model is too slow under the sanitizers"};
    need_node();
    std::string chromium;
    for (const char* c : {"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"})
        if (::access(c, X_OK) == 0) {
            chromium = c;
            break;
        }
    if (chromium.empty()) SKIP("chromium", "no Chromium (.ci/run installs the chromium package)");
    // A model slow enough (tens of tokens/s) that the reply visibly streams and the stop button
    // lands before the reply could end by itself.
    const std::string model = bt::temp_dir() + "/page.gguf";
    REQUIRE_EQ(bt::run_cmd(bt::bankml_bin() + " synth --embd 1024 --layers 12 --ff 3072 --heads 16 --kv-heads 8 -o " + model).code, 0);
    ServeProc s({"-m", model, "-t", "1", "-c", "4096"});
    REQUIRE(s.ok());
    auto p = bt::run_cmd("timeout 120 node '" + node_dir() + "/chat_page.mjs' " + std::to_string(s.port()) + " " + chromium);
    if (p.code != 0) bt::fail(__FILE__, __LINE__, "node chat_page.mjs: " + p.out + p.err);
    auto j = json::try_parse(p.out);
    REQUIRE(j);
    CHECK_EQ((*j)["user"].as_string(), "hello from the browser");
    CHECK_GT((*j)["reply"].as_string().size(), 0u);
    CHECK((*j)["stopped"].bool_or(false));
    // The stopped reply freed its slot: the server counts it as cancelled.
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    int64_t cancelled = 0;
    while (cancelled == 0 && std::chrono::steady_clock::now() < end) {
        json::Value u = usage(s);
        cancelled = u["engine"]["cancelled"].is_integer() ? u["engine"]["cancelled"].as_int() : 0;
        if (cancelled == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    CHECK_EQ(cancelled, 1);
}

TEST(serve_usage_reports_what_the_card_does) {
    setenv("BANKML_GPU_ALLOW_SOFTWARE", "1", 1);  // the test card (lavapipe where there is no other)
    // The server verifies every kernel on the card before it is ready: on lavapipe under the
    // sanitizers on a slow machine that takes minutes.
    ServeProc s({"-m", tiny(), "-t", "1", "-c", "128"}, 900);
    unsetenv("BANKML_GPU_ALLOW_SOFTWARE");
    if (!s.ok()) std::fprintf(stderr, "    the server's stderr: %s\n", s.err().c_str());
    REQUIRE(s.ok());
    int st = 0;
    json::Value r = s.post_json("/v1/completions", R"({"prompt":[1,2,3],"max_tokens":4,"temperature":0})", &st);
    CHECK_EQ(st, 200);
    json::Value u = usage(s);
    if (u["gpu"].is_null()) SKIP("gpu", "no card runs the model here: " + s.err());
    const json::Value& g = u["gpu_limiter"];
    CHECK_EQ(g["mode"].as_string(), "forward");
    CHECK_EQ(g["limit"].as_double(), 0.8);
    CHECK_GE(g["tokens_on_card"].as_int(), 3 + 3);
    CHECK_GT(g["allocated_bytes"].as_uint(), (uint64_t)0);
    int rc = s.stop();
    CHECK_EQ(rc, 0);
}
