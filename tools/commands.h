/* Entry points of the tq subcommands, one file each (tools/cmd_*.c). Each returns the process
 * exit code: 0 success, 1 failure, 2 (TQ_EXIT_USAGE) a usage error. */
#ifndef TQ_TOOLS_COMMANDS_H
#define TQ_TOOLS_COMMANDS_H

int cmd_codec_bench(int argc, char **argv);

#endif
