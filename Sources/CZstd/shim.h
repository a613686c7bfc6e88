#ifndef APPBOX_CZSTD_SHIM_H
#define APPBOX_CZSTD_SHIM_H
/* libzstd's stable API: one-shot frame compression and decompression, streaming
 * decompression, and the frame inspection functions (ZSTD_getFrameContentSize,
 * ZSTD_findFrameCompressedSize). Imported by AppboxArchive only. */
#include <zstd.h>
#include <zstd_errors.h>
#endif
