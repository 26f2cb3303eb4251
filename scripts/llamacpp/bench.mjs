#!/usr/bin/env node
// llama.cpp's prompt-processing and decode speed on one GGUF, in this process,
// through node-llama-cpp's prebuilt CPU binaries. A measurement tool for
// scripts/compare_llamacpp.sh, not part of qvl's build or tests.
//
// Needs: node >= 20 and `npm install node-llama-cpp` (npm registry access) in
// a folder named by NODE_LLAMA_CPP_DIR (default ~/.cache/qvl-llamacpp); it brings
// llama.cpp as prebuilt shared libraries with one ggml-cpu library per x86
// CPU generation, of which ggml picks the best this CPU runs.
//
//   node scripts/llamacpp/bench.mjs --model M.gguf --prompt-file P.txt \
//        [--threads 2] [-n 64] [--repeat 3] [--ctx 2048] [--batch 512]
//        [--flash-attention auto|on|off] [--json]
//
// What it times, to match `qvl bench --prompt`: the prompt is wrapped in the
// same chat turn qvl builds (<|im_start|>user ... <|im_end|> <|im_start|>assistant),
// prefilled in one call (prefill_tok_s = prompt tokens / seconds until the
// first token), then greedy decoding of n tokens; decode_tok_s = (n - 1) /
// seconds from the first to the last token, as qvl counts it. Every repeat
// starts from an empty KV cache; the first one also pays the page faults of
// the mmapped weights, as qvl's lazy load does. One JSON line per repeat.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import path from "node:path";
import { performance } from "node:perf_hooks";

function parseArgs(argv) {
  const a = { threads: 2, n: 64, repeat: 3, json: false, ctx: 2048, batch: 512, flash: "auto" };
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i], v = () => {
      if (i + 1 >= argv.length) throw new Error(`${k} needs a value`);
      return argv[++i];
    };
    if (k === "--model") a.model = v();
    else if (k === "--prompt-file") a.promptFile = v();
    else if (k === "--prompt") a.prompt = v();
    else if (k === "--threads") a.threads = Number(v());
    else if (k === "-n") a.n = Number(v());
    else if (k === "--repeat") a.repeat = Number(v());
    else if (k === "--ctx") a.ctx = Number(v());
    else if (k === "--batch") a.batch = Number(v());
    else if (k === "--flash-attention") a.flash = v();
    else if (k === "--json") a.json = true;
    else throw new Error(`unknown argument ${k}`);
  }
  if (!a.model) throw new Error("--model M.gguf is required");
  if (!["auto", "on", "off"].includes(a.flash)) throw new Error("--flash-attention is auto, on or off");
  if (!a.prompt && !a.promptFile) throw new Error("--prompt-file or --prompt is required");
  return a;
}

async function loadNodeLlamaCpp() {
  const dir = process.env.NODE_LLAMA_CPP_DIR || `${process.env.XDG_CACHE_HOME || `${process.env.HOME}/.cache`}/qvl-llamacpp`;
  const require = createRequire(path.join(dir, "package.json"));
  let entry;
  try {
    entry = require.resolve("node-llama-cpp");
  } catch {
    throw new Error(`node-llama-cpp is not installed in ${dir} (run: cd ${dir} && npm install node-llama-cpp)`);
  }
  return import(entry);
}

// ggml loads one libggml-cpu-<variant>.so, the best this CPU can run (e.g.
// zen4 = AVX-512 with VBMI/VNNI/BF16); the process's mappings say which.
function loadedCpuLibraries() {
  try {
    const maps = readFileSync("/proc/self/maps", "utf8");
    const libs = new Set(maps.match(/libggml-cpu[-\w.]*\.so/g) ?? []);
    return [...libs].join(",");
  } catch {
    return "";
  }
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const text = args.prompt ?? readFileSync(args.promptFile, "utf8").trim();
  const { getLlama, LlamaLogLevel } = await loadNodeLlamaCpp();

  const llama = await getLlama({
    gpu: false, build: "never", maxThreads: args.threads,
    logLevel: LlamaLogLevel.error,
    logger: (level, msg) => process.stderr.write(msg),
  });
  const model = await llama.loadModel({ modelPath: args.model, gpuLayers: 0, useMmap: true });
  const readyS = performance.now() / 1000;  // process start -> model loaded
  const context = await model.createContext({
    contextSize: args.ctx, batchSize: args.batch, sequences: 1,
    threads: { ideal: args.threads, min: args.threads },
    flashAttention: args.flash === "auto" ? "auto" : args.flash === "on",
  });
  const sequence = context.getSequence();
  const chat = `<|im_start|>user\n${text}<|im_end|>\n<|im_start|>assistant\n`;
  const promptTokens = model.tokenize(chat, true);
  if (promptTokens.length + args.n > context.contextSize)
    throw new Error(`prompt (${promptTokens.length} tokens) + ${args.n} does not fit the context`);

  const info = {
    llama_cpp: `${llama.llamaCppRelease.repo}@${llama.llamaCppRelease.release}`,
    build: llama.buildType,
    threads: context.currentThreads,
    flash_attention: args.flash,
    system_info: llama.systemInfo,
    cpu_backend: loadedCpuLibraries(),
  };
  for (let r = 0; r < args.repeat; r++) {
    await sequence.clearHistory();
    const t0 = performance.now();
    let tFirst = 0, tLast = 0, count = 0;
    for await (const token of sequence.evaluate(promptTokens, { temperature: 0 })) {
      void token;
      const now = performance.now();
      if (count === 0) tFirst = now;
      tLast = now;
      if (++count >= args.n) break;
    }
    const prefillS = (tFirst - t0) / 1000, decodeS = (tLast - tFirst) / 1000;
    const row = {
      model: path.basename(args.model), repeat: r + 1, ready_s: readyS,
      prompt_tokens: promptTokens.length, prefill_s: prefillS,
      prefill_tok_s: promptTokens.length / prefillS,
      generated_tokens: count, decode_s: decodeS,
      decode_tok_s: count > 1 ? (count - 1) / decodeS : 0,
      ...(r === 0 ? info : {}),
    };
    if (args.json) console.log(JSON.stringify(row));
    else console.log(`${row.model} r${row.repeat}: prompt ${row.prompt_tokens} tok, prefill ` +
      `${row.prefill_tok_s.toFixed(1)} tok/s, decode ${row.decode_tok_s.toFixed(2)} tok/s ` +
      `(${count} tokens), ready ${readyS.toFixed(2)} s`);
  }
  if (!args.json) console.log(`backend: ${info.cpu_backend || "(not reported)"}\nsystem_info: ${info.system_info}`);
  await context.dispose();
  await model.dispose();
  await llama.dispose();
}

main().catch((e) => {
  console.error(`bench.mjs: ${e.message ?? e}`);
  process.exit(1);
});
