/* tq: the command-line front end. One file per subcommand (tools/cmd_*.c). */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "common.h"
#include "quants.h"
#include "turboquant.h"


typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"run", cmd_run, "demo: f16 vs turbo3 KV on the default model (text, memory, speed, KLD)"},
    {"generate", cmd_generate, "continue a prompt, streaming tokens (-p, -n, --temp, --kv)"},
    {"chat", cmd_chat, "multi-turn chat with the model's template, turns from stdin (--system, --kv)"},
    {"serve", cmd_serve, "OpenAI-compatible HTTP server: batched sequences on the compressed KV cache"},
    {"perplexity", cmd_perplexity, "llama.cpp-style perplexity, KLD and top-1 per KV scheme"},
    {"passkey", cmd_passkey, "pass-key retrieval rate per KV scheme and needle depth"},
    {"bench", cmd_bench, "prefill and decode tokens/s at depths, bytes read per token vs the machine's bandwidth"},
    {"codec-bench", cmd_codec_bench, "codec quality and throughput per bit width"},
    {"attn-bench", cmd_attn_bench, "decode/prefill attention speed and error per KV scheme vs f16"},
    {"tokenize", cmd_tokenize, "token ids of a text (-p/-f), as llama-tokenize; vocabulary-only GGUFs too"},
};

static void usage(FILE *f) {
    fprintf(f, "tq %s — TurboQuant vector and KV-cache compression\n\n", tq_version_string());
    fprintf(f, "usage: tq COMMAND [OPTIONS]   (tq COMMAND --help for a command's options)\n\n");
    fprintf(f, "commands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-14s %s\n", commands[i].name, commands[i].summary);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return TQ_EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        /* the three kernel choices (codec, attention, weights): make test-avx2 compares them
         * with and without its forcing environment */
        printf("tq %s (kernels: %s, attention %s, weights %s)\n", tq_version_string(), tq_kernels_name(),
               tq_attn_kernels_name(), quant_kernels_name());
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "tq: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return TQ_EXIT_USAGE;
}
