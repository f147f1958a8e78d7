/* test_sha256.c - src/io/sha256.c against FIPS 180-4 example vectors
 * (NIST CSHS examples: "", "abc", the 448- and 896-bit messages, one
 * million 'a') and against lengths that land on every padding boundary
 * (55, 56, 57, 63, 64, 65, 119, 120, 128 bytes of 'a'; expected values
 * from coreutils sha256sum), plus streaming: every split point and
 * byte-at-a-time updates give the one-shot digest. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/sha256.h"
#include "testutil.h"

static void hash_hex(const void *p, size_t n, char hex[65])
{
    struct sha256 s;
    uint8_t d[SHA256_DIGEST_SIZE];
    sha256_init(&s);
    sha256_update(&s, p, n);
    sha256_final(&s, d);
    sha256_hex(d, hex);
}

static void check_vector(const char *what, const void *p, size_t n, const char *want)
{
    char got[65];
    hash_hex(p, n, got);
    CHECK(!strcmp(got, want), "sha256(%s) = %s (want %s)", what, got, want);
}

int main(void)
{
    check_vector("\"\"", "", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    check_vector("\"abc\"", "abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    check_vector("448-bit message", m448, strlen(m448),
                 "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    const char *m896 = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopq"
                       "klmnopqrlmnopqrsmnopqrstnopqrstu";
    check_vector("896-bit message", m896, strlen(m896),
                 "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");

    char *a = malloc(1000000);
    if (!a) return 1;
    memset(a, 'a', 1000000);
    check_vector("10^6 x 'a'", a, 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");

    static const struct { size_t n; const char *want; } pads[] = {
        {55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
        {56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"},
        {57, "f13b2d724659eb3bf47f2dd6af1accc87b81f09f59f2b75e5c0bed6589dfe8c6"},
        {63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"},
        {64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
        {65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0"},
        {119, "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb"},
        {120, "2f3d335432c70b580af0e8e1b3674a7c020d683aa5f73aaaedfdc55af904c21c"},
        {128, "6836cf13bac400e9105071cd6af47084dfacad4e5e302c94bfed24e013afb73e"},
    };
    for (size_t i = 0; i < sizeof pads / sizeof pads[0]; i++) {
        char what[32];
        snprintf(what, sizeof what, "%zu x 'a'", pads[i].n);
        check_vector(what, a, pads[i].n, pads[i].want);
    }

    /* streaming: pseudo-random 300 bytes, split at every point, and
     * byte by byte, must equal the one-shot digest */
    uint8_t msg[300];
    uint32_t x = 12345;
    for (size_t i = 0; i < sizeof msg; i++) {
        x = x * 1103515245u + 12345u;
        msg[i] = (uint8_t)(x >> 16);
    }
    char whole[65], part[65];
    hash_hex(msg, sizeof msg, whole);
    int bad_split = -1;
    for (size_t k = 0; k <= sizeof msg && bad_split < 0; k++) {
        struct sha256 s;
        uint8_t d[SHA256_DIGEST_SIZE];
        sha256_init(&s);
        sha256_update(&s, msg, k);
        sha256_update(&s, msg + k, sizeof msg - k);
        sha256_final(&s, d);
        sha256_hex(d, part);
        if (strcmp(part, whole)) bad_split = (int)k;
    }
    CHECK(bad_split < 0, "two updates split at every point 0..300 equal one update (first bad split %d)",
          bad_split);
    struct sha256 s;
    uint8_t d[SHA256_DIGEST_SIZE];
    sha256_init(&s);
    for (size_t i = 0; i < sizeof msg; i++) sha256_update(&s, msg + i, 1);
    sha256_final(&s, d);
    sha256_hex(d, part);
    CHECK(!strcmp(part, whole), "byte-at-a-time updates equal one update (%s)", part);

    free(a);
    return test_summary();
}
