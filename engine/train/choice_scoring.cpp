#include "engine/train/choice_scoring.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "parallel/communicator.hpp"
#include "parallel/host_collectives.hpp"

namespace loom {
namespace {

// One row of a forward: the item and ending it scores, and where its ending's losses lie.
struct Row {
  size_t item = 0, ending = 0;
  int first = 0, count = 0;  // the positions [first, first + count) whose targets are the ending
  int dropped = 0;           // context tokens left out on the left
};

int argmin(const std::vector<double>& v) {
  return int(std::min_element(v.begin(), v.end()) - v.begin());  // the first of equal minima
}

}  // namespace

int ChoiceScore::pred() const { return argmin(loss); }

int ChoiceScore::pred_norm() const {
  std::vector<double> mean(loss.size());
  for (size_t e = 0; e < loss.size(); ++e) mean[e] = loss[e] / double(tokens[e]);
  return argmin(mean);
}

std::string choices_fit(const std::vector<ChoiceItem>& items, int seq_len) {
  // A row of seq_len + 1 tokens holds one context token and an ending of seq_len.
  for (const ChoiceItem& it : items)
    for (size_t e = 0; e < it.endings.size(); ++e)
      if (it.endings[e].size() > size_t(seq_len))
        return "example " + std::to_string(it.index) + ": ending " + std::to_string(e) + " has " +
               std::to_string(it.endings[e].size()) + " tokens, more than the " + std::to_string(seq_len) +
               " positions that score them";
  return "";
}

int context_dropped(const ChoiceItem& it, size_t e, int seq_len) {
  return std::max(0, int(it.context.size() + it.endings[e].size()) - (seq_len + 1));
}

std::vector<ChoiceItem> open_choice_items(const std::string& path, const std::string& key, int vocab_size, int seq_len,
                                          int64_t limit, const std::function<std::unique_ptr<Tokenizer>()>& tokenizer) {
  std::unique_ptr<Tokenizer> tok;
  if (!is_llmc_eval_file(path, key)) tok = tokenizer();
  std::vector<ChoiceItem> items = read_choice_items(path, tok.get(), vocab_size, key);
  if (limit > 0 && size_t(limit) < items.size()) items.resize(size_t(limit));
  if (const std::string no = choices_fit(items, seq_len); !no.empty()) throw std::runtime_error(key + " " + path + ": " + no);
  return items;
}

ChoiceTally tally_choices(const std::vector<ChoiceScore>& scores) {
  ChoiceTally t;
  t.items = scores.size();
  for (const ChoiceScore& s : scores) {
    t.right += s.pred() == s.label;
    t.right_norm += s.pred_norm() == s.label;
    t.cut += s.truncated > 0;
    t.endings += s.loss.size();
  }
  return t;
}

std::vector<ChoiceScore> score_choices(Gpt& model, parallel::ProcessGroups& groups, const std::vector<ChoiceItem>& items) {
  const int B = model.micro_batch(), T = model.shape().seq_len;
  const int dp = groups.layout().dp, mine = groups.coord().dp;
  const StageSpec& st = model.stage();
  // Every dp rank runs as many forwards as the busiest one (a ZeRO-3 unit's gather is collective
  // over dp): its own rows, then rows of padding.
  std::vector<size_t> rows_of(size_t(dp), 0);
  for (size_t i = 0; i < items.size(); ++i) rows_of[i % size_t(dp)] += items[i].endings.size();
  const size_t forwards = (*std::max_element(rows_of.begin(), rows_of.end()) + size_t(B) - 1) / size_t(B);
  std::vector<ChoiceScore> out;
  std::vector<Row> rows;
  for (size_t i = size_t(mine); i < items.size(); i += size_t(dp)) {
    const ChoiceItem& it = items[i];
    ChoiceScore s;
    s.item = int64_t(i);
    s.index = it.index;
    s.label = it.label;
    s.loss.assign(it.endings.size(), 0.0);
    s.tokens.assign(it.endings.size(), 0);
    for (size_t e = 0; e < it.endings.size(); ++e) {
      const int m = int(it.endings[e].size()), n = int(it.context.size()) + m;
      const int dropped = context_dropped(it, e, T), kept = n - dropped;  // kept <= T + 1
      // The ending fills the window's last m tokens; position t's target is token t + 1.
      rows.push_back(Row{out.size(), e, kept - m - 1, m, dropped});
      s.tokens[e] = m;
      s.truncated = std::max(s.truncated, dropped);
    }
    out.push_back(std::move(s));
  }
  std::vector<int32_t> tokens(size_t(B) * T), targets(size_t(B) * T);
  const size_t elems = size_t(B) * T * model.shape().d_model;
  parallel::Communicator& pp = groups.device_pp();  // activations: device buffers on CUDA
  for (size_t f = 0; f < forwards; ++f) {
    const size_t r0 = f * size_t(B);
    const size_t nrows = r0 < rows.size() ? std::min(size_t(B), rows.size() - r0) : 0;
    std::fill(tokens.begin(), tokens.end(), 0);
    std::fill(targets.begin(), targets.end(), 0);
    for (size_t b = 0; b < nrows; ++b) {
      const Row& row = rows[r0 + b];
      const ChoiceItem& it = items[size_t(out[row.item].item)];
      // The window: context (less its first `dropped` tokens) then the ending.
      std::vector<int32_t> w(it.context.begin() + row.dropped, it.context.end());
      w.insert(w.end(), it.endings[row.ending].begin(), it.endings[row.ending].end());
      int32_t* tk = tokens.data() + b * size_t(T);
      int32_t* tg = targets.data() + b * size_t(T);
      // Inputs: every token but the last (at most T); targets: every token but the first.
      std::copy(w.begin(), w.end() - 1, tk);
      for (size_t t = 0; t + 1 < w.size(); ++t) tg[t] = w[t + 1];
    }
    if (!st.first) pp.recv(model.input(0), elems, pp.rank() - 1, 22);
    model.forward(0, tokens.data(), targets.data(), 0.0f);
    if (!st.last) {
      pp.send(model.output(0), elems, pp.rank() + 1, 22);
      continue;
    }
    const std::vector<float> loss = model.position_losses();
    for (size_t b = 0; b < nrows; ++b) {
      const Row& row = rows[r0 + b];
      double sum = 0;
      for (int t = row.first; t < row.first + row.count; ++t) sum += double(loss[b * size_t(T) + size_t(t)]);
      out[row.item].loss[row.ending] = sum;
    }
  }
  // One rank of each dp share reports it: the last stage's first tp rank.
  if (!st.last || groups.coord().tp != 0) out.clear();
  return out;
}

std::vector<ChoiceScore> gather_choice_scores(parallel::MpiCommunicator& comm, const std::vector<ChoiceScore>& mine,
                                              int root) {
  // Each score as doubles: item, index, label, endings, truncated, then (loss, tokens) per ending.
  std::vector<double> flat;
  for (const ChoiceScore& s : mine) {
    flat.insert(flat.end(),
                {double(s.item), double(s.index), double(s.label), double(s.loss.size()), double(s.truncated)});
    for (size_t e = 0; e < s.loss.size(); ++e) flat.insert(flat.end(), {s.loss[e], double(s.tokens[e])});
  }
  const std::vector<char> all = parallel::gather_bytes(comm, flat.data(), flat.size() * sizeof(double), root);
  std::vector<double> v(all.size() / sizeof(double));
  if (!all.empty()) std::memcpy(v.data(), all.data(), all.size());
  std::vector<ChoiceScore> out;
  for (size_t p = 0; p + 5 <= v.size();) {
    ChoiceScore s;
    s.item = int64_t(v[p]);
    s.index = int64_t(v[p + 1]);
    s.label = int(v[p + 2]);
    const size_t k = size_t(v[p + 3]);
    s.truncated = int(v[p + 4]);
    p += 5;
    for (size_t e = 0; e < k; ++e, p += 2) {
      s.loss.push_back(v[p]);
      s.tokens.push_back(int(v[p + 1]));
    }
    out.push_back(std::move(s));
  }
  // Rank r's items are r, r + ranks, ...: back into file order.
  std::sort(out.begin(), out.end(), [](const ChoiceScore& a, const ChoiceScore& b) { return a.item < b.item; });
  return out;
}

std::string choice_scores_jsonl(const std::vector<ChoiceScore>& scores) {
  std::string out;
  char b[64];
  for (const ChoiceScore& s : scores) {
    out += "{\"item\": " + std::to_string(s.item) + ", \"index\": " + std::to_string(s.index) + ", \"label\": " + std::to_string(s.label) +
           ", \"pred\": " + std::to_string(s.pred()) + ", \"pred_norm\": " + std::to_string(s.pred_norm()) +
           ", \"loss\": [";
    for (size_t e = 0; e < s.loss.size(); ++e) {
      std::snprintf(b, sizeof b, "%s%.9g", e ? ", " : "", s.loss[e]);
      out += b;
    }
    out += "], \"tokens\": [";
    for (size_t e = 0; e < s.tokens.size(); ++e) out += (e ? ", " : "") + std::to_string(s.tokens[e]);
    out += "], \"truncated\": " + std::to_string(s.truncated) + "}\n";
  }
  return out;
}

}  // namespace loom
