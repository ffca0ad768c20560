// ChatML as the Qwen3 chat template in the GGUF writes it (without tools):
//   <|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n
// with, for enable_thinking = false, an empty think block "<think>\n\n</think>\n\n" after the
// generation prompt (the Qwen3 way of asking for an answer without reasoning). Assistant turns in
// the history lose their reasoning (the text up to </think>), as the template does.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace bankml::model {

struct ChatMessage {
    std::string role;  // "system", "user", "assistant"
    std::string content;
};

// The whole conversation rendered as the template renders it.
std::string chatml_render(const std::vector<ChatMessage>& messages, bool add_generation_prompt, bool enable_thinking);

// What to append to a running context for the next user turn, for a conversation that keeps what the
// model generated (llama-cli's way: earlier turns are not re-rendered, so their reasoning stays
// in the context). `after_reply` is true when an assistant reply precedes: it is closed first.
std::string chatml_next_turn(std::string_view user_text, bool after_reply, bool enable_thinking);

// An assistant reply without its reasoning: the text after the last </think>, leading newlines
// removed (the template's rule); a reply with no </think> is returned whole.
std::string strip_thinking(std::string_view reply);

}  // namespace bankml::model
