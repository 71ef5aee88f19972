#pragma once
// Small files that must never be seen half-written (manifests, `latest`, run.json): written to
// PATH.tmp, flushed to disk, then renamed over PATH. Readers see the old file or the new one.
#include <string>

namespace loom {

// Throws std::runtime_error naming the temporary file (and `hint`, e.g. the recipe key that
// chose the directory) if it cannot be written.
void write_file_atomically(const std::string& path, const std::string& text, const std::string& hint = "");
// fsync of a file or directory (best effort: errors are ignored).
void fsync_path(const std::string& path);

}  // namespace loom
