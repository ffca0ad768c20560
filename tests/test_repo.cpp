// The repository speaks of bankml alone: its design, its use and its measurements. No file outside
// .git, the installed node packages and the build outputs names how it was developed (who worked
// on it, in what sittings, after which ticket or document).
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "test.h"

namespace fs = std::filesystem;

TEST(repository_speaks_of_bankml_alone) {
    const fs::path root = fs::canonical(fs::path(bt::data_path("ORACLES.md"))).parent_path().parent_path().parent_path();
    REQUIRE(fs::exists(root / "Makefile"));
    REQUIRE(fs::exists(root / "src"));
    // Lower case; matched case-insensitively anywhere in a text file. Written in two pieces, so that
    // a plain search of the tree does not find them here.
    const std::vector<std::string> words = {std::string("integ") + "rator", std::string("hel") + "per",
                                            std::string("sess") + "ion", std::string("the is") + "sue",
                                            std::string("the sp") + "ec's", std::string("the orig") + "inal's"};
    const std::vector<std::string> skip_dirs = {".git", "build", "build-asan", "tests/node/node_modules"};
    const fs::path self = fs::path("tests") / "test_repo.cpp";  // lists the words itself
    size_t files = 0, found = 0;
    for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
        const fs::path rel = fs::relative(it->path(), root);
        if (it->is_directory()) {
            if (std::find(skip_dirs.begin(), skip_dirs.end(), rel.generic_string()) != skip_dirs.end())
                it.disable_recursion_pending();
            continue;
        }
        if (!it->is_regular_file() || rel == self) continue;
        const std::string ext = rel.extension().string();
        if (ext == ".o" || ext == ".d") continue;
        std::ifstream f(it->path(), std::ios::binary);
        std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        if (text.find('\0') != std::string::npos) continue;  // binaries: models, golden vectors, ./bankml
        files++;
        std::string lower = text;
        for (char& c : lower) c = char(std::tolower((unsigned char)c));
        for (const std::string& w : words)
            for (size_t at = lower.find(w); at != std::string::npos; at = lower.find(w, at + 1)) {
                const size_t line = size_t(std::count(lower.begin(), lower.begin() + long(at), '\n')) + 1;
                std::fprintf(stderr, "  %s:%zu: \"%s\"\n", rel.generic_string().c_str(), line, w.c_str());
                found++;
            }
    }
    CHECK_GT(files, (size_t)100);  // the walk saw the tree
    CHECK_EQ(found, (size_t)0);
}
