/* build_id.h - which source the library was built from. */
#ifndef CBX_BUILD_ID_H
#define CBX_BUILD_ID_H

/* The short git commit id of the source tree at build time, followed by
 * "-dirty-<8 hex digits>" (a digest of the uncommitted changes under src/
 * and include/) when the tree differs from it; "" when built outside a git
 * checkout. Generated on every build by cmake/build_id.cmake. */
extern const char cbx_build_commit[];

#endif
