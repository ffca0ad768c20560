#include "serve/page.h"

namespace bankml::serve {

const char* chat_page() { return "<!doctype html><title>bankml</title><p>bankml</p>"; }

}  // namespace bankml::serve
