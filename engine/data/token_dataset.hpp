#pragma once
// A dataset split as a list of token shards, from any of the formats Loom reads
// (data.format: auto | text | loom | llmc | megatron; see docs/data.md), checked against the
// model before training starts.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/data/token_shard.hpp"

namespace loom {

// One dataset of a weighted blend ("0.7 data/web 0.3 data/code", Megatron's --data-path form):
// its shards are TokenDataset::shards[first_shard, first_shard + shard_count).
struct BlendPart {
  double weight = 0;   // as given (sampler.hpp turns the weights into shares)
  std::string source;  // the part's path, as given
  size_t first_shard = 0, shard_count = 0;
};

struct TokenDataset {
  std::vector<TokenShard> shards;
  std::string format;       // the resolved format
  std::string source;       // the path as given, for messages
  int declared_vocab = 0;   // vocab size a manifest or header declares, 0 if none
  std::string declared_by;  // the file that declares it
  std::vector<BlendPart> blend;  // a weighted blend's parts, in the order given; empty: not a blend
  size_t tokens() const;
};

// A blend's "WEIGHT PATH WEIGHT PATH ..." (two parts or more, weights > 0): the pairs, or none
// when `spec` is not one (no whitespace, an existing path, or a first word that is no number).
// Throws std::runtime_error naming `key` for a blend that is malformed.
std::vector<std::pair<double, std::string>> parse_blend(const std::string& spec, const std::string& key);

// Opens `path` as `format` ("auto" detects by magic), or each part of a blend so (their shards
// one after the other, BlendPart recording which are whose). `key` ("data.train") names the recipe key
// in errors; `split` ("train"/"val") picks the split of a `loom prep` directory.
// Paths: a file, a directory (a `loom prep` output with manifest.json, or a directory of shards),
// a glob ("data/fineweb_train_*.bin"), or a Megatron PREFIX (PREFIX.idx + PREFIX.bin).
TokenDataset open_dataset(const std::string& path, const std::string& format, const std::string& key,
                          const std::string& split);

// What a dataset holds, in two numbers a checkpoint records: its token count and the CRC-32C of
// its shards' token bytes in shard order (not the headers: the same tokens re-saved in another
// header give the same value; tokens of another width do not).
struct DataFingerprint {
  uint64_t tokens = 0;
  uint32_t crc32c = 0;
};

// Before training: no empty shard, every shard at least one sample (seq_len + 1 tokens) long,
// every token id < vocab_size, and a declared vocabulary equal to the recipe's. Throws
// std::runtime_error naming the key, the file and what was expected. Returns the fingerprint,
// from the same pass over the tokens.
DataFingerprint validate_dataset(const TokenDataset& d, int vocab_size, int seq_len, const std::string& key);

}  // namespace loom
