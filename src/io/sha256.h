/* sha256.h - SHA-256 (FIPS 180-4 §6.2), streaming: the download client
 * hashes each file as it arrives and compares with the Hugging Face LFS
 * oid. Portable C, no tables beyond the 64 round constants; about
 * 200-300 MB/s on one core, faster than the network it checks.
 *
 * Thread safety: a struct sha256 belongs to one thread at a time;
 * independent states may be used concurrently. */
#ifndef CBX_IO_SHA256_H
#define CBX_IO_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_DIGEST_SIZE 32

struct sha256 {
    uint32_t h[8];      /* H(i), FIPS 180-4 §6.2.2 */
    uint64_t nbytes;    /* message length so far */
    uint8_t block[64];  /* pending partial block */
    size_t fill;        /* bytes in block, < 64 */
};

void sha256_init(struct sha256 *s);
void sha256_update(struct sha256 *s, const void *data, size_t n);
/* Pad, finish and write the 32-byte digest; s must be re-initialised
 * before further use. */
void sha256_final(struct sha256 *s, uint8_t out[SHA256_DIGEST_SIZE]);
/* Digest as 64 lower-case hex digits plus NUL. */
void sha256_hex(const uint8_t digest[SHA256_DIGEST_SIZE], char hex[65]);

#endif
