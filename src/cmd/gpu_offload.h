// The bridge between the forward pass and gpu::Worker: model/ knows no card and gpu/ knows no
// model, so the commands hand the model a verified card as a model::Offload.
#pragma once
#include <memory>

#include "gpu/worker.h"
#include "model/forward.h"

namespace bankml::cmd {

// A worker as the forward pass's offload.
std::shared_ptr<model::Offload> as_offload(std::unique_ptr<gpu::Worker> w);

// For `run` and `bench`: when the model has Q1_0 matrices, opens gpu::Worker (full verification,
// share from BANKML_GPU_SHARE or calibrated against `threads` CPU threads), gives it to the model
// and says on stderr which card takes what share. Without a usable card the model stays on the
// CPU (Worker::open says why, unless BANKML_GPU=off).
void attach_gpu(model::Model& m, int threads);

}  // namespace bankml::cmd
