#include "model/chat.h"

#include "core/error.h"

namespace bankml::model {

static std::string_view lstrip_nl(std::string_view s) {
    while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
    return s;
}
static std::string_view rstrip_nl(std::string_view s) {
    while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
    return s;
}

static const char* const EMPTY_THINK = "<think>\n\n</think>\n\n";

std::string strip_thinking(std::string_view reply) {
    size_t e = reply.rfind("</think>");
    if (e == std::string_view::npos) return std::string(reply);
    return std::string(lstrip_nl(reply.substr(e + 8)));
}

std::string chatml_render(const std::vector<ChatMessage>& msgs, bool add_generation_prompt, bool enable_thinking) {
    std::string out;
    // The last user message: assistant turns after it keep their reasoning, earlier ones lose it.
    long last_query = long(msgs.size()) - 1;
    for (long i = long(msgs.size()) - 1; i >= 0; --i)
        if (msgs[i].role == "user") {
            last_query = i;
            break;
        }
    for (size_t i = 0; i < msgs.size(); ++i) {
        const ChatMessage& m = msgs[i];
        if (m.role == "system" || m.role == "user") {
            out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
        } else if (m.role == "assistant") {
            std::string_view c = m.content, content = c, reasoning;
            size_t close = c.find("</think>");
            if (close != std::string_view::npos) {
                content = lstrip_nl(c.substr(c.rfind("</think>") + 8));
                std::string_view before = rstrip_nl(c.substr(0, close));
                size_t open = before.rfind("<think>");
                reasoning = lstrip_nl(open == std::string_view::npos ? before : before.substr(open + 7));
            }
            out += "<|im_start|>assistant\n";
            bool last = i + 1 == msgs.size();
            if (long(i) > last_query && (last || !reasoning.empty()))
                out += "<think>\n" + std::string(rstrip_nl(lstrip_nl(reasoning))) + "\n</think>\n\n" + std::string(lstrip_nl(content));
            else
                out += std::string(content);
            out += "<|im_end|>\n";
        } else {
            throw Error("chat: unknown role '" + m.role + "' (system, user or assistant)");
        }
    }
    if (add_generation_prompt) {
        out += "<|im_start|>assistant\n";
        if (!enable_thinking) out += EMPTY_THINK;
    }
    return out;
}

std::string chatml_next_turn(std::string_view user_text, bool after_reply, bool enable_thinking) {
    std::string out;
    if (after_reply) out += "<|im_end|>\n";
    out += "<|im_start|>user\n" + std::string(user_text) + "<|im_end|>\n<|im_start|>assistant\n";
    if (!enable_thinking) out += EMPTY_THINK;
    return out;
}

}  // namespace bankml::model
