/* nibble — the one CLI. Each command lives in apps/cmd_<name>.c and defines
 *   int nb_cmd_<name>(int argc, char **argv);      (argv[0] is the command name)
 *   const char nb_cmd_<name>_summary[];            (one line for --help)
 * CMake generates the table (build/gen/nb_commands.h) from the files present.
 * Try: build/nibble --help */
#include <stdio.h>
#include <string.h>

#include "nibble.h"

#define NB_COMMAND(ident, cli)                                                          \
    int nb_cmd_##ident(int argc, char **argv);                                          \
    extern const char nb_cmd_##ident##_summary[];
#include "nb_commands.h"
#undef NB_COMMAND

typedef struct nb_command {
    const char *name;
    int (*fn)(int, char **);
    const char *summary;
} nb_command;

static const nb_command nb_commands[] = {
#define NB_COMMAND(ident, cli) {cli, nb_cmd_##ident, nb_cmd_##ident##_summary},
#include "nb_commands.h"
#undef NB_COMMAND
};

static void nb_usage(FILE *f)
{
    fprintf(f,
            "nibble %s — an inference server for NVFP4 Mixture-of-Experts models\n\n"
            "usage: nibble <command> [options]     (nibble <command> --help for its options)\n\n"
            "commands:\n",
            nb_version());
    for (size_t i = 0; i < sizeof nb_commands / sizeof nb_commands[0]; i++)
        fprintf(f, "  %-16s %s\n", nb_commands[i].name, nb_commands[i].summary);
    fprintf(f, "\nenvironment: NIBBLE_LOG=trace|debug|info|warn|error (default info)\n");
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        nb_usage(stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("nibble %s\n", nb_version());
        return 0;
    }
    for (size_t i = 0; i < sizeof nb_commands / sizeof nb_commands[0]; i++)
        if (!strcmp(argv[1], nb_commands[i].name)) return nb_commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "nibble: unknown command '%s'\n\n", argv[1]);
    nb_usage(stderr);
    return 2;
}
