// The chat page served at `/`: one self-contained HTML file (no framework, no outside resource).
#pragma once

namespace bankml::serve {

const char* chat_page();

}  // namespace bankml::serve
