// The bridge between the forward pass and gpu::Worker: model/ knows no card and gpu/ knows no
// model, so the commands hand the model a verified card as a model::Offload.
#pragma once
#include <memory>

#include "gpu/worker.h"
#include "model/forward.h"

namespace bankml::cmd {

// A worker as the forward pass's offload.
std::shared_ptr<model::Offload> as_offload(std::unique_ptr<gpu::Worker> w);

// The whole decode on the first selected card (BANKML_GPU, software renderers only with
// BANKML_GPU_ALLOW_SOFTWARE=1) once it verified every kernel: one stderr line says which card
// runs the model, or why it stays on the CPU. False: the CPU runs it.
bool run_on_card(model::Model& m);

// For `run`, `chat`, `bench` and `perplexity`: the whole decode on a verified card (run_on_card);
// otherwise, when the model has Q1_0 matrices, opens gpu::Worker (full verification, share from
// BANKML_GPU_SHARE or calibrated against `threads` CPU threads, then per-shape calibration),
// gives it to the model and says on stderr which card takes what share. Without a usable card the
// model stays on the CPU (Worker::open says why, unless BANKML_GPU=off).
void attach_gpu(model::Model& m, int threads);
// The worker alone (attach_gpu's fallback), also where the card could run the whole token: for
// `bench --gpu share`, which compares the two ways of using a card.
void attach_share(model::Model& m, int threads);

}  // namespace bankml::cmd
