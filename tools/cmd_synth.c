/* cmd_synth.c - `chatterbox synth VARIANT -o DIR [--seed N]`. */
#include <stdio.h>

#include "cli.h"

int cmd_synth(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "chatterbox synth: not built yet\n");
    return 1;
}
