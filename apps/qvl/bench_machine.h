// qvl bench's machine line: which CPU ran the figures and what it could do in
// the same minutes (kernels/machine_probe.h, tensor/gemm_probe.h).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace qvl::app {

// {cpu, isa, threads} and, with probe, read_gb_s, bf16_gflop_s, int8_gop_s
// and the shapes they were measured on, and checkpoint_map_s_per_gb: the CPU
// time of mapping the model's *.safetensors pages, which says how the page
// cache holds them (io/mapped_file.h; it also reads what is not cached yet).
// Call after the thread count is set.
nlohmann::json machine_json(bool probe, const std::string& model_dir);

// "AMD EPYC (family 25, model 17), avx512, 2 threads: read 41.2 GB/s, bf16 GEMM 612 GFLOP/s, int8 GEMM 700
// GOP/s, checkpoint maps in 0.004 CPU s/GB"
std::string machine_line(const nlohmann::json& machine);

}  // namespace qvl::app
