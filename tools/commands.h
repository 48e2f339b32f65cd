/* Entry points of the tq subcommands, one file each (tools/cmd_*.c). Each returns the process
 * exit code: 0 success, 1 failure, 2 (TQ_EXIT_USAGE) a usage error. */
#ifndef TQ_TOOLS_COMMANDS_H
#define TQ_TOOLS_COMMANDS_H

int cmd_codec_bench(int argc, char **argv);
int cmd_attn_bench(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_passkey(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_bench(int argc, char **argv);

#endif
