// The kernel's view of the video cards: /sys/class/drm/cardN/device gives each card's PCI ids, its
// driver, VRAM and GTT totals (amdgpu publishes them), PCI address and NUMA node. A machine without
// /sys/class/drm (a container, a VM) simply has no records. Never throws: what cannot be read is a
// note, or a field left empty.
#pragma once
#include <string>
#include <vector>

#include "gpu/gpu.h"

namespace bankml::gpu::sysfs {

// The directory that stands for /sys: BANKML_SYSFS_ROOT (tests point it at fixture trees), else "/sys".
std::string root_from_env();

// Every ROOT/class/drm/cardN that has a device, in card number order. Connectors (card0-DP-1) and
// cards without a `device` link are skipped; a card whose ids cannot be read is skipped with a note;
// an unreadable optional file (VRAM, GTT, NUMA node) leaves its field empty, with a note when the
// file exists but holds no number.
std::vector<Sysfs> cards(const std::string& root, std::vector<std::string>& notes);

}  // namespace bankml::gpu::sysfs
