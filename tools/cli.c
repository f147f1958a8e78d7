/* cli.c - helpers shared by the subcommands: usage errors and checked
 * option values (see cli.h). */
#include "cli.h"

#include "core/backend.h"
#include "hf_download.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "chatterbox %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see 'chatterbox %s --help')\n", cmd);
    va_end(ap);
    return 2;
}

const char *cli_option_value(const char *cmd, int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        fprintf(stderr, "chatterbox %s: %s\n", cmd,
                argv[*i][0] == '-' ? "option needs a value (see --help)" : "unexpected argument");
        return NULL;
    }
    return argv[++*i];
}

bool cli_parse_num(const char *cmd, const char *opt, const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) {
        cli_usage_error(cmd, "%s needs a number in [%g, %g], got '%s'", opt, lo, hi, s);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_int(const char *cmd, const char *opt, const char *s, long long lo, long long hi,
                   long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        cli_usage_error(cmd, "%s needs an integer in [%lld, %lld], got '%s'", opt, lo, hi, s);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_u64(const char *cmd, const char *opt, const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-') {
        cli_usage_error(cmd, "%s needs a non-negative integer, got '%s'", opt, s);
        return false;
    }
    *out = v;
    return true;
}

cbx_status cli_check_output(const char *path, char *err)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return err_setf(err, CBX_ERR_IO, "%s: is a directory", path);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return err_setf(err, CBX_ERR_IO, "%s: cannot write: directory %s does not exist", path, dir);
    if (access(dir, W_OK) != 0)
        return err_setf(err, CBX_ERR_IO, "%s: cannot write: directory %s is not writable", path, dir);
    return CBX_OK;
}

void cli_on_stop_signals(void (*fn)(int))
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = fn;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

const char *cli_prefix_dir(const char *opt, bool off, char *buf, size_t n)
{
    if (off) return NULL;
    if (opt) return opt;
    if ((opt = getenv("CHATTERBOX_PREFIX_CACHE"))) return opt;
    if (n < 16 || hf_cache_root(buf, n - 16) != CBX_OK) return NULL;
    strcat(buf, "/prefixes");
    return buf;
}

bool cli_backend_ok(const char *cmd, const char *val)
{
    char err[ERR_MAX];
    if (backend_check_name(val, err) == CBX_OK) return true;
    cli_usage_error(cmd, "--backend: %s", err);
    return false;
}
