#pragma once
// Multiple-choice evaluation, completion style (llm.c's and nanoGPT's HellaSwag): each ending is
// appended to the context and the model's cross-entropy summed over the ending's tokens; the
// prediction is the ending of the least total loss (acc) or of the least mean loss per token
// (acc_norm, the figure llm.c and nanoGPT report). A row is at most seq_len + 1 tokens, its last
// never an input (nothing is predicted from it): a longer one loses context tokens from the left
// (the ending is always whole), as lm-evaluation-harness truncates.
// Forward only; the data-parallel ranks each score their own items, and gather_choice_scores
// collects them.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/data/choice_items.hpp"
#include "engine/model/gpt.hpp"
#include "parallel/mpi_communicator.hpp"
#include "parallel/process_groups.hpp"

namespace loom {

struct ChoiceScore {
  int64_t item = 0;          // its place in the file, from 0
  int64_t index = 0;         // the number the file gives it (llm.c's <EXAMPLE_INDEX>)
  int label = 0;
  std::vector<double> loss;  // per ending: its tokens' summed cross-entropy, nats
  std::vector<int> tokens;   // per ending: how many tokens were scored (the ending's length)
  int truncated = 0;         // context tokens dropped to fit seq_len (the most over the endings)
  int pred() const;          // the ending of the least summed loss (the first, on a tie)
  int pred_norm() const;     // the ending of the least mean loss per token
};

// "" when every item's endings fit seq_len with at least one context token before them, else
// the first that does not, named.
std::string choices_fit(const std::vector<ChoiceItem>& items, int seq_len);

// How many context tokens ending `e` of `it` loses on the left to fit seq_len.
int context_dropped(const ChoiceItem& it, size_t e, int seq_len);

// The items of `path` for a model of `vocab_size` and `seq_len` (the first `limit`; 0: all), as
// `loom eval --choices` and log.choices (`key`) take them: `tokenizer()` is asked for only when
// the file is text (JSON lines), not llm.c's tokenized eval file. Throws naming `key` and `path`.
std::vector<ChoiceItem> open_choice_items(const std::string& path, const std::string& key, int vocab_size, int seq_len,
                                          int64_t limit, const std::function<std::unique_ptr<Tokenizer>()>& tokenizer);

// The items of this rank's dp share (item i to dp rank i % dp), scored micro-batch by
// micro-batch of the model's B rows, the pipeline stages passing activations on as evaluate()
// does, in any layout (tp, pp, ZeRO). Collective over the world, with the same items on every
// rank. Returns the scores on the last stage's first tp rank of each dp share, none elsewhere.
std::vector<ChoiceScore> score_choices(Gpt& model, parallel::ProcessGroups& groups, const std::vector<ChoiceItem>& items);

// The counts an accuracy is made of: items, those right by least total loss (acc) and by least
// loss per token (acc_norm), those whose context was cut, and endings scored.
struct ChoiceTally {
  size_t items = 0, right = 0, right_norm = 0, cut = 0, endings = 0;
  double acc() const { return double(right) / double(items); }
  double acc_norm() const { return double(right_norm) / double(items); }
};
ChoiceTally tally_choices(const std::vector<ChoiceScore>& scores);

// Every rank's scores on `root`, in item order (other ranks get an empty vector). Collective.
std::vector<ChoiceScore> gather_choice_scores(parallel::MpiCommunicator& comm, const std::vector<ChoiceScore>& mine,
                                              int root = 0);

// One JSON line per item: {"item", "index", "label", "pred", "pred_norm", "loss": [...], "tokens": [...],
// "truncated"}, for looking at what the model got wrong.
std::string choice_scores_jsonl(const std::vector<ChoiceScore>& scores);

}  // namespace loom
