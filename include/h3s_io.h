/* h3strict public API: files -- safetensors reading and writing, inputs read in place from a safetensors file,
 * the checks an output path passes before anything is computed, atomic writes, strict JSON.
 *
 * Ownership and errors as in h3s_model.h: status codes, h3s_last_error(), outputs untouched on failure.  Every
 * writer is atomic (a temporary file in the same directory, fsync, rename): a failed write leaves nothing at the
 * path, and a file already there stays as it was.  A writer replaces only a regular file: a symbolic link (even one
 * to a regular file), directory, FIFO, device or socket at the output path is H3S_ERR_INVALID and is not touched.
 * The library assumes a little-endian host. */
#ifndef H3S_PUBLIC_IO_H
#define H3S_PUBLIC_IO_H

#include "h3s.h"
#include "h3s_model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ safetensors
 * Format: 8-byte little-endian header length N, N bytes of JSON header
 *   {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ..., "__metadata__": {str: str}},
 * then the data area.  The reader accepts exactly what the reference implementation accepts, restricted to the
 * dtypes of h3s_dtype: the tensors, sorted by offset, tile the data area with no gap, no overlap and no trailing
 * byte. */
typedef struct h3s_st_entry {
    const char *name;
    h3s_tensor tensor; /* from h3s_st_open: tensor.data points into the read-only mapping (do not write) */
} h3s_st_entry;

typedef struct h3s_st_file h3s_st_file;

/* Map the file read-only and validate the whole header before any tensor is touched.  Errors: H3S_ERR_IO (cannot
 * open or map), H3S_ERR_FORMAT (malformed; the file and the tensor are named), H3S_ERR_DTYPE (a dtype other than
 * F64, F32, BF16, F16, I64, BOOL), H3S_ERR_UNSUPPORTED (more than H3S_MAX_DIMS dims).  Entries are ordered by their
 * place in the file.  The file (h3s_st_close) owns the entries and their tensors' memory. */
H3S_API h3s_status h3s_st_open(const char *path, h3s_st_file **out);
H3S_API int64_t h3s_st_count(const h3s_st_file *f);
/* The i-th entry (borrowed, valid while f is open); NULL if i is out of range. */
H3S_API const h3s_st_entry *h3s_st_entry_at(const h3s_st_file *f, int64_t i);
/* The entry of that name (borrowed); NULL if absent. */
H3S_API const h3s_st_entry *h3s_st_find(const h3s_st_file *f, const char *name);
H3S_API void h3s_st_close(h3s_st_file *f); /* NULL is fine */

/* Write a file atomically.  Entries are written in the given order, contiguously; names must be unique, valid UTF-8
 * and not "__metadata__"; host tensors only.  The bytes depend on the entries alone: header keys in entry order,
 * no spaces, padded with spaces to a multiple of 8. */
H3S_API h3s_status h3s_st_write(const char *path, const h3s_st_entry *entries, int64_t count);

/* One string pair of a file's "__metadata__" object. */
typedef struct h3s_st_meta {
    const char *key, *value;
} h3s_st_meta;

/* h3s_st_write with a "__metadata__" object first in the header, its keys in the given order (valid UTF-8,
 * unique).  With nmeta == 0 the bytes are exactly h3s_st_write's. */
H3S_API h3s_status h3s_st_write_meta(const char *path, const h3s_st_entry *entries, int64_t count,
                                     const h3s_st_meta *meta, int64_t nmeta);

/* The forward arguments of an open inputs file as views of its tensors (no copy; names as h3s_inputs; unknown or
 * missing tensors are H3S_ERR_FORMAT).  The file must stay open while `in` is used; do not h3s_inputs_free the
 * views.  h3s_inputs_read is the owning copy. */
H3S_API h3s_status h3s_inputs_from_file(const h3s_st_file *f, h3s_inputs *in);

/* Write `in` as an inputs file, the file `h3strict inputs` writes and h3s_inputs_read reads: every tensor under its
 * name, in the order of h3s_inputs' fields, attention_mask last and only when present (data != NULL), with the
 * "__metadata__" pairs meta[0..nmeta) (NULL and 0 for none: then the bytes are exactly h3s_st_write's).  The
 * tensors are written as they are (check them with h3s_inputs_validate first where that matters).  Errors:
 * H3S_ERR_INVALID for a NULL path or `in`, else those of h3s_st_write_meta. */
H3S_API h3s_status h3s_inputs_write(const char *path, const h3s_inputs *in, const h3s_st_meta *meta, int64_t nmeta);

/* ------------------------------------------------------------------ output paths and atomic files */

/* The checks an output path passes before a command computes anything: what is at the path now (above); its last
 * component names a file; the directory holding it exists; and the place the file would land (the real path of
 * that directory, then the file name) is none of `inputs` (by real path, or the same inode when the output exists),
 * lies inside none of `dirs` nor inside their transformer/ subfolders (each resolved), and is none of the files in
 * those (by real path or inode: a snapshot's links into a cache's blobs/ lead to the model's files).  NULL entries
 * are skipped; a negative count, or a NULL array with a positive count, is H3S_ERR_INVALID.  Failure: H3S_ERR_INVALID
 * naming the output and the input, file or directory it collides with;
 * H3S_ERR_IO when the directory cannot be resolved. */
H3S_API h3s_status h3s_io_check_output(const char *path, const char *const *inputs, int ninputs,
                                       const char *const *dirs, int ndirs);

/* Read a whole small file (at most `limit` bytes, else H3S_ERR_FORMAT) as the library reads its JSON inputs: opened
 * without blocking, and only a regular file (a FIFO or a device is refused at once, H3S_ERR_IO); the buffer is sized
 * by the file.  *out is NUL-terminated (*len bytes before the NUL), the caller's (h3s_free); untouched on failure. */
H3S_API h3s_status h3s_io_read_small_file(const char *path, size_t limit, char **out, size_t *len);

/* Write len bytes to path atomically (temporary file, fsync, rename). */
H3S_API h3s_status h3s_io_write_file_atomic(const char *path, const void *data, size_t len);

/* The same atomic write for a caller that writes the file itself through a descriptor (a stream, a library that
 * takes a FILE *).  h3s_io_temp_open creates a new empty file next to path (".<base>.tmp-<pid>-<n>", made
 * exclusively, of the base name at most its first 100 bytes), open for reading and writing in *fd; *tmp is its name.
 * It fails, creating nothing, when the path names no file or something other than a regular file is at it.
 * Then exactly one of: h3s_io_temp_commit (fsync, close, the same check of what is at path, rename onto path, fsync
 * of the directory; on any failure the temporary file is removed and path is untouched) or h3s_io_temp_discard
 * (close and remove).  Both free *tmp and close fd. */
H3S_API h3s_status h3s_io_temp_open(const char *path, int *fd, char **tmp);
H3S_API h3s_status h3s_io_temp_commit(int fd, char *tmp, const char *path);
H3S_API void h3s_io_temp_discard(int fd, char *tmp);

/* Remove every temporary file and temporary model directory this process is writing (h3s_io_write_file_atomic's,
 * h3s_io_temp_open's, h3s_st_write's and model init's), for a process about to end on a signal (SIGINT, SIGTERM,
 * ...).  The targets are untouched: an init publishing its model finishes first, and its temporary directory then
 * holds only the model it replaced.  Afterwards every write the library starts or commits fails (H3S_ERR_IO) and no
 * init publishes.  It takes a mutex, so it is not async-signal-safe: call it from a thread that waits for the signal
 * (sigwait with the signal blocked in every thread), as the CLI does, not from a handler. */
H3S_API void h3s_io_remove_temporaries(void);

/* Check that text[0..len) is strict JSON (RFC 8259), as every JSON file the library reads must be: exactly one value
 * with nothing but JSON whitespace around it, no control byte or NUL in a string, valid UTF-8, numbers in the JSON
 * grammar, no object naming a member twice.  Failure: H3S_ERR_FORMAT, "<what>: <problem>" naming the byte offset
 * or the member.  (A lenient parser may then read the text: it will see what was checked.) */
H3S_API h3s_status h3s_json_check(const char *text, size_t len, const char *what);

#ifdef __cplusplus
}
#endif
#endif
