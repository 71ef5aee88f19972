#pragma once
// Where `loom prep` writes (docs/data.md). Never into --out in place: the dataset is written in
// a fresh directory beside it (OUT.partial-XXXXXX) and moved in only once complete. An existing
// dataset is replaced only with --force, and a directory holding anything but a dataset never.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace loom {

class PrepOutput {
 public:
  // Checks --out (`arg`) and creates the working directory beside it. `own_files` (the inputs,
  // vocabulary and merges) must not lie inside a directory --force would replace. Throws
  // std::runtime_error naming --out and what to do.
  PrepOutput(const std::string& arg, bool force, const std::vector<std::string>& own_files);
  ~PrepOutput();  // removes the working directory unless committed (a failed prep leaves nothing)
  PrepOutput(const PrepOutput&) = delete;
  PrepOutput& operator=(const PrepOutput&) = delete;

  const std::filesystem::path& work() const { return work_; }
  // Moves the finished working directory to --out (exchanging it with the dataset it replaces).
  // Returns whether it replaced one.
  bool commit();

 private:
  std::filesystem::path out_, work_;
  bool replaces_ = false;
  std::optional<unsigned> keep_mode_;  // an existing --out's permission bits, given back at commit()
};

}  // namespace loom
