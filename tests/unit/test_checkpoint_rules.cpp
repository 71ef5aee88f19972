// What may be resumed from and what may be deleted in a checkpoint.dir (checkpoint_catalog.hpp),
// and where a resumed run's data stream continues (resume_data.hpp). Real directories and
// manifests on disk; no MPI, no HDF5 (the manifest is what these rules read).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "engine/checkpoint/checkpoint_catalog.hpp"
#include "engine/checkpoint/checkpoint_verify.hpp"
#include "engine/config/recipe_io.hpp"
#include "engine/data/data_loader.hpp"
#include "engine/train/resume_data.hpp"

using namespace loom;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/loom_ckrules.XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

// A checkpoint directory with a manifest recording `step` and, if given, health.
void make_ckpt(const fs::path& dir, const std::string& name, int64_t step, int clean = -1, int64_t first_bad = -1) {
  fs::create_directories(dir / name);
  std::ofstream m(dir / name / "manifest.json");
  m << "{\"step\": " << step;
  if (clean >= 0)
    m << ", \"health\": {\"clean\": " << (clean ? "true" : "false")
      << ", \"first_bad_step\": " << (first_bad >= 0 ? std::to_string(first_bad) : "null") << "}";
  m << "}\n";
}

std::vector<std::string> names(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  for (const auto& p : paths) out.push_back(fs::path(p).filename().string());
  return out;
}

}  // namespace

TEST_CASE("only names Loom writes are checkpoints, ordered by the step recorded inside") {
  int64_t step = 0;
  CHECK(parse_checkpoint_name("step_00000010", &step));
  CHECK(step == 10);
  CHECK(parse_checkpoint_name("step_123456789", &step));
  CHECK(step == 123456789);
  CHECK_FALSE(parse_checkpoint_name("step_10_backup", &step));
  CHECK_FALSE(parse_checkpoint_name("step_0000001", &step));  // seven digits
  CHECK_FALSE(parse_checkpoint_name("step_00000010.partial", &step));
  CHECK_FALSE(parse_checkpoint_name("Step_00000010", &step));
  CHECK_FALSE(parse_checkpoint_name("step_000000010", &step));  // a user's spelling of step 10
  CHECK(checkpoint_name(42) == "step_00000042");

  TempDir t;
  make_ckpt(t.path, "step_00000010", 10);
  make_ckpt(t.path, "step_00000015", 15);
  make_ckpt(t.path, "step_10_backup", 10);     // a user's copy: ignored
  make_ckpt(t.path, "step_00000099", 20);      // renamed: its manifest says 20
  fs::create_directories(t.path / "step_00000030");  // manifest deleted
  fs::create_directories(t.path / "step_00000035.partial");  // an interrupted save: expected, silent
  make_ckpt(t.path, "step_00000015.replaced-20261123T150000Z", 15);  // set aside by a later history
  std::ofstream(t.path / "latest") << "step_00000015\n";
  const CheckpointCatalog c = scan_checkpoints(t.path.string());
  REQUIRE(c.complete.size() == 2);
  CHECK(c.complete[0].step == 10);
  CHECK(c.complete[1].step == 15);
  CHECK(fs::path(c.latest).filename() == "step_00000015");
  REQUIRE(c.ignored.size() == 4);
  std::string all;
  for (const auto& line : c.ignored) all += line + "\n";
  CHECK(all.find("step_10_backup: not a name Loom writes") != std::string::npos);
  CHECK(all.find("step_00000030: no manifest.json") != std::string::npos);
  CHECK(all.find("step_00000099: its manifest records step 20") != std::string::npos);
  CHECK(all.find(".partial") == std::string::npos);
  CHECK(all.find("step_00000015.replaced-20261123T150000Z: another history's checkpoint") != std::string::npos);
}

TEST_CASE("a step number with more digits than eight sorts by value, not as a string") {
  TempDir t;
  make_ckpt(t.path, "step_99999999", 99999999);
  make_ckpt(t.path, "step_100000000", 100000000);
  const CheckpointCatalog c = scan_checkpoints(t.path.string());
  REQUIRE(c.complete.size() == 2);
  CHECK(c.complete.back().step == 100000000);
}

TEST_CASE("resume tries the checkpoint `latest` names first, then older ones, never an abandoned newer history") {
  TempDir t;
  for (int s : {10, 15, 20, 25}) make_ckpt(t.path, checkpoint_name(s), s);
  {
    // An explicit resume from step 10 saved step 15 again and wrote `latest`: the abandoned
    // history's 20 and 25 must not win over what the last session saved.
    // Nor may they be the fallback when step 15 turns out damaged: step 10 is.
    std::ofstream(t.path / "latest") << "step_00000015\n";
    std::vector<std::string> newer;
    const auto order = names(resume_order(scan_checkpoints(t.path.string()), &newer));
    CHECK(order == std::vector<std::string>{"step_00000015", "step_00000010"});
    CHECK(names(newer) == std::vector<std::string>{"step_00000025", "step_00000020"});
  }
  std::ofstream(t.path / "latest") << "step_00000077\n";  // names nothing complete: newest first
  const CheckpointCatalog c = scan_checkpoints(t.path.string());
  const auto order = names(resume_order(c));
  CHECK(order == std::vector<std::string>{"step_00000025", "step_00000020", "step_00000015", "step_00000010"});
  REQUIRE(!c.ignored.empty());
  CHECK_THAT(c.ignored.back(), Catch::Contains("latest names 'step_00000077', not a complete checkpoint here"));
}

TEST_CASE("retention keeps keep_last, `latest`, and the last clean checkpoint before a divergence") {
  TempDir t;
  SECTION("all clean: the oldest beyond keep_last go") {
    for (int s : {5, 10, 15, 20}) make_ckpt(t.path, checkpoint_name(s), s, 1);
    std::ofstream(t.path / "latest") << "step_00000020\n";
    const Retention r = plan_retention(scan_checkpoints(t.path.string()), 3);
    CHECK(names(r.prune) == std::vector<std::string>{"step_00000005"});
    CHECK(r.pinned.empty());
  }
  SECTION("the issue's case: 10, 15, 20 clean, then 25, 28, 31 saved after step 22 diverged") {
    for (int s : {10, 15, 20}) make_ckpt(t.path, checkpoint_name(s), s, 1);
    for (int s : {25, 28, 31}) make_ckpt(t.path, checkpoint_name(s), s, 0, 22);
    std::ofstream(t.path / "latest") << "step_00000031\n";
    const Retention r = plan_retention(scan_checkpoints(t.path.string()), 3);
    CHECK(names(r.prune) == std::vector<std::string>{"step_00000010", "step_00000015"});
    REQUIRE(r.pinned.size() == 1);
    CHECK(fs::path(r.pinned[0].path).filename() == "step_00000020");
    CHECK(r.pinned[0].before_step == 22);
  }
  SECTION("two histories: each unclean checkpoint keeps the last clean one before its own first bad step") {
    // History A saved clean 20, 30, 40; the user resumed from 20 and history B went bad at 22
    // and saved 24. A's clean 40 must not hide B's last clean state (20).
    for (int s : {20, 30, 40}) make_ckpt(t.path, checkpoint_name(s), s, 1);
    make_ckpt(t.path, checkpoint_name(24), 24, 0, 22);
    std::ofstream(t.path / "latest") << "step_00000024\n";
    const CheckpointCatalog c = scan_checkpoints(t.path.string());
    const Retention r = plan_retention(c, 2);
    CHECK(r.prune.empty());  // 30 and 40 an abandoned history, 20 and 24 the current one's two newest
    CHECK(r.pinned.empty());  // 20, pinned for 24, is inside keep_last: not announced
    CHECK(fs::path(last_clean_before(c, 22)).filename() == "step_00000020");
    CHECK(fs::path(last_clean_before(c, -1)).filename() == "step_00000040");
  }
  SECTION("the pinned one inside keep_last is not announced, and nothing clean is lost") {
    for (int s : {10, 20}) make_ckpt(t.path, checkpoint_name(s), s, 1);
    make_ckpt(t.path, checkpoint_name(25), 25, 0, 22);
    const Retention r = plan_retention(scan_checkpoints(t.path.string()), 3);
    CHECK(r.prune.empty());
    CHECK(r.pinned.empty());
  }
  SECTION("a checkpoint unclean only for non-finite parameters pins the clean one before it") {
    for (int s : {10, 20}) make_ckpt(t.path, checkpoint_name(s), s, 1);
    for (int s : {30, 40}) make_ckpt(t.path, checkpoint_name(s), s, 0);
    const Retention r = plan_retention(scan_checkpoints(t.path.string()), 2);
    CHECK(names(r.prune) == std::vector<std::string>{"step_00000010"});
    REQUIRE(r.pinned.size() == 1);
    CHECK(fs::path(r.pinned[0].path).filename() == "step_00000020");
  }
  SECTION("checkpoints of older Loom versions (no health) count as clean") {
    for (int s : {10, 20, 30}) make_ckpt(t.path, checkpoint_name(s), s);
    const Retention r = plan_retention(scan_checkpoints(t.path.string()), 1);
    CHECK(names(r.prune) == std::vector<std::string>{"step_00000010", "step_00000020"});
  }
  SECTION("`latest` is never pruned, nor the abandoned history numbered above it") {
    for (int s : {10, 20, 30}) make_ckpt(t.path, checkpoint_name(s), s, 1);
    std::ofstream(t.path / "latest") << "step_00000010\n";
    const Retention r = plan_retention(scan_checkpoints(t.path.string()), 1);
    CHECK(r.prune.empty());
  }
  SECTION("keep_last counts the current history only: a new history's saves do not prune each other away") {
    // History A saved 100, 200, 300; a resume from 100 saved 150 and 175 (`latest`).
    for (int s : {100, 150, 175, 200, 300}) make_ckpt(t.path, checkpoint_name(s), s, 1);
    std::ofstream(t.path / "latest") << "step_00000175\n";
    const Retention r = plan_retention(scan_checkpoints(t.path.string()), 2);
    CHECK(names(r.prune) == std::vector<std::string>{"step_00000100"});  // 150 and 175 kept, 200 and 300 untouched
  }
  SECTION("a damaged `latest` checkpoint still marks where the current history ends") {
    for (int s : {100, 200, 300}) make_ckpt(t.path, checkpoint_name(s), s, 1);
    fs::create_directories(t.path / "step_00000150");  // the new history's save, its manifest lost
    std::ofstream(t.path / "latest") << "step_00000150\n";
    const CheckpointCatalog c = scan_checkpoints(t.path.string());
    CHECK(c.latest.empty());
    CHECK(c.latest_step == 150);
    CHECK(names(resume_order(c)) == std::vector<std::string>{"step_00000100"});
    CHECK(plan_retention(c, 1).prune.empty());
  }
  SECTION("strays are never in the prune list") {
    for (int s : {10, 20, 30}) make_ckpt(t.path, checkpoint_name(s), s, 1);
    make_ckpt(t.path, "step_10_backup", 10, 1);
    const Retention r = plan_retention(scan_checkpoints(t.path.string()), 1);
    for (const auto& p : r.prune) CHECK(p.find("backup") == std::string::npos);
  }
}

TEST_CASE("a resumed run continues at the next unseen sample whatever the global batch") {
  const DataFingerprint print{1219803, 0x1234abcd};
  const SavedDataPosition saved{LoaderState{20, 640}, 1337, true, 32, 38118, 1219803, 0x1234abcd};
  // The data now: seed, global batch, samples per epoch, with the saved fingerprint or another.
  auto now = [&](uint64_t seed, int64_t gb, int64_t spe) { return DataNow{seed, gb, spe, false, print, {}, ""}; };
  auto now_data = [&](int64_t spe, DataFingerprint p) { return DataNow{1337, 32, spe, false, p, {}, ""}; };
  std::vector<std::string> notes;
  SECTION("same recipe: no notes") {
    const LoaderState at = resume_data_position(saved, now(1337, 32, 38118), false, &notes);
    CHECK(at.next_step == 20);
    CHECK(at.next_sample == 640);
    CHECK(notes.empty());
  }
  SECTION("global batch 32 -> 64: sample 640, not 20 x 64 = 1280; stated") {
    const LoaderState at = resume_data_position(saved, now(1337, 64, 38118), false, &notes);
    CHECK(at.next_sample == 640);
    REQUIRE(notes.size() == 1);
    CHECK(notes[0].find("continuing at sample 640") != std::string::npos);
  }
  SECTION("a new seed or dataset is refused without consent, naming the key") {
    CHECK_THROWS_WITH(resume_data_position(saved, now(7, 32, 38118), false, &notes),
                      Catch::Contains("train.seed changed from 1337 to 7") &&
                          Catch::Contains("checkpoint.allow_changes=true"));
    CHECK_THROWS_WITH(resume_data_position(saved, now(1337, 32, 50000), false, &notes),
                      Catch::Contains("50000 samples per epoch"));
    const LoaderState at = resume_data_position(saved, now(7, 32, 38118), true, &notes);
    CHECK(at.next_sample == 640);
    REQUIRE(notes.size() == 1);
    CHECK(notes[0].find("train.seed changed") != std::string::npos);
  }
  SECTION("a blend's other shares or part sizes are a new order: refused without consent, said with it") {
    DataNow blended = now(1337, 32, 38118);
    blended.blend = "50% of 37000 + 50% of 1118 samples";
    SavedDataPosition was = saved;
    was.blend = "80% of 37000 + 20% of 1118 samples";
    CHECK_THROWS_WITH(resume_data_position(was, blended, false, &notes),
                      Catch::Contains("the data.train blend changed from 80% of 37000 + 20% of 1118 samples to 50% of "
                                      "37000 + 50% of 1118 samples") &&
                          Catch::Contains("checkpoint.allow_changes=true"));
    // Shards moved between the parts: the same total, fingerprint and shares, another order.
    was.blend = "50% of 36000 + 50% of 2118 samples";
    CHECK_THROWS_WITH(resume_data_position(was, blended, false, &notes),
                      Catch::Contains("from 50% of 36000 + 50% of 2118 samples to 50% of 37000"));
    // A run of one dataset resumed on a blend (and an older checkpoint, which recorded none).
    CHECK_THROWS_WITH(resume_data_position(saved, blended, false, &notes),
                      Catch::Contains("changed from one dataset to 50% of 37000"));
    was.blend = blended.blend;
    CHECK_NOTHROW(resume_data_position(was, blended, false, &notes));
    was.blend = "80% of 37000 + 20% of 1118 samples";
    const LoaderState at = resume_data_position(was, blended, true, &notes);
    CHECK(at.next_sample == 640);
    REQUIRE(notes.size() == 1);
    CHECK_THAT(notes[0], Catch::Contains("(checkpoint.allow_changes=true): the sample order from sample 640 on"));
  }
  SECTION("the same number of samples but other tokens: refused without consent, said with it") {
    const DataFingerprint edited{print.tokens, 0x1234abce};
    CHECK_THROWS_WITH(resume_data_position(saved, now_data(38118, edited), false, &notes),
                      Catch::Contains("the training data's tokens changed (1219803 tokens of CRC-32C 1234abcd at the "
                                      "checkpoint, now 1219803 of 1234abce)") &&
                          Catch::Contains("checkpoint.allow_changes=true"));
    // A few tokens more, not a sample more: the same order, other data.
    CHECK_THROWS_WITH(resume_data_position(saved, now_data(38118, {print.tokens + 3, print.crc32c}), false, &notes),
                      Catch::Contains("now 1219806 of 1234abcd"));
    const LoaderState at = resume_data_position(saved, now_data(38118, edited), true, &notes);
    CHECK(at.next_sample == 640);
    REQUIRE(notes.size() == 1);
    CHECK(notes[0].find("goes on at sample 640 of the same order, in the new data") != std::string::npos);
  }
  SECTION("another number of samples is said once, as a new order (the fingerprint differs too)") {
    CHECK_THROWS_WITH(resume_data_position(saved, now_data(50000, {2000000, 7}), false, &notes),
                      Catch::Contains("50000 samples per epoch") && !Catch::Contains("tokens changed"));
  }
  SECTION("a checkpoint that recorded no fingerprint: nothing to compare") {
    SavedDataPosition older = saved;
    older.data_tokens = -1;
    resume_data_position(older, now_data(38118, {5, 5}), false, &notes);
    CHECK(notes.empty());
  }
  SECTION("data.val's tokens changed: no consent needed, but said (val_loss is not comparable)") {
    SavedDataPosition with_val = saved;
    with_val.val_tokens = 121880;
    with_val.val_crc32c = 0x123ab597;
    DataNow same = now(1337, 32, 38118);
    same.val = {121880, 0x123ab597};
    resume_data_position(with_val, same, false, &notes);
    CHECK(notes.empty());
    DataNow edited = same;
    edited.val = {121880, 0x3a57587e};
    resume_data_position(with_val, edited, false, &notes);
    REQUIRE(notes.size() == 1);
    CHECK(notes[0] == "data.val's tokens changed (121880 tokens of CRC-32C 123ab597 at the checkpoint, now 121880 of "
                      "3a57587e): val_loss from here on is over other tokens than before the resume, not comparable "
                      "with it");
    notes.clear();
    DataNow no_val = same;  // data.val dropped: no val_loss, nothing to compare
    no_val.val = {};
    resume_data_position(with_val, no_val, false, &notes);
    CHECK(notes.empty());
    resume_data_position(saved, edited, false, &notes);  // the checkpoint recorded no data.val
    CHECK(notes.empty());
  }
  SECTION("an older checkpoint without the position: step x the recipe's global batch") {
    const SavedDataPosition old{LoaderState{20, -1}, 0, false, -1, -1, -1, 0};
    const LoaderState at = resume_data_position(old, now(7, 64, 1), false, &notes);
    CHECK(at.next_sample == 1280);
    REQUIRE(notes.size() == 1);
    CHECK(notes[0].find("records no sample position") != std::string::npos);
  }
  SECTION("seeds above 2^63 are compared like any other") {
    const SavedDataPosition big{LoaderState{20, 640}, 0xFFFFFFFFFFFFFFF0ull, true, 32, 38118, -1, 0};
    CHECK_THROWS_WITH(resume_data_position(big, now(1, 32, 38118), false, &notes),
                      Catch::Contains("train.seed changed from 18446744073709551600 to 1"));
  }
}

TEST_CASE("the loader started at a sample position yields the same stream as one that got there") {
  // A dataset of 400 tokens in memory: one shard, samples of seq_len 4.
  auto file = std::make_shared<std::vector<uint8_t>>();
  for (int i = 0; i < 400; ++i) file->push_back(uint8_t(i % 251));
  TokenDataset d;
  TokenShard s;
  s.token_bytes = 1;
  s.count = file->size();
  s.tokens = file->data();
  s.name = "memory";
  d.shards.push_back(s);
  // Global batch 4 for 5 steps (20 samples), then global batch 8 from sample 20.
  LoaderLayout small{4, 2, 2, 0, 1, 9};
  LoaderLayout big{4, 2, 4, 0, 1, 9};
  DataLoader first(d, small, 1);
  for (int i = 0; i < 5; ++i) first.next();
  const LoaderState st = first.state();
  CHECK(st.next_step == 5);
  CHECK(st.next_sample == 20);
  DataLoader resumed(d, big, 1, st);
  const StepBatch b = resumed.next();
  CHECK(b.step == 5);
  // Its first sample is the stream's sample 20, which the small-batch loader gives at step 5.
  DataLoader reference(d, small, 1, LoaderState{5, -1});
  const StepBatch want = reference.next();
  for (int i = 0; i < 4; ++i) CHECK(b.tokens[size_t(i)] == want.tokens[size_t(i)]);
  CHECK(resumed.state().next_sample == 28);
  // Data parallel: rank 1 of 2 takes the second half of each global batch, from the same position.
  LoaderLayout big_dp1{4, 2, 2, 1, 2, 9};  // global batch 8 = micro 2 x accum 2 x dp 2
  DataLoader rank1(d, big_dp1, 1, st);
  const StepBatch mine = rank1.next();
  DataLoader along(d, small, 1, LoaderState{6, -1});  // stream positions 24.. (small: 4 per step)
  const StepBatch at24 = along.next();
  for (int i = 0; i < 4 * 4; ++i) CHECK(mine.tokens[size_t(i)] == at24.tokens[size_t(i)]);
}

TEST_CASE("a directory with another kind of manifest is named for what it is, not a missing key", "[checkpoint]") {
  TempDir t;
  const auto with_manifest = [&](const std::string& name, const std::string& json) {
    fs::create_directories(t.path / name);
    std::ofstream(t.path / name / "manifest.json") << json;
    return (t.path / name).string();
  };
  // `loom prep`'s output given where a checkpoint is expected (checkpoint.resume, model.init_from).
  CHECK(precheck_checkpoint(with_manifest("prep", "{\"format\": \"loom-tokens\", \"shards\": []}")) ==
        "a `loom prep` dataset (its manifest.json is a dataset's), not a checkpoint");
  CHECK(precheck_checkpoint(with_manifest("other", "{\"format\": \"something\"}")) ==
        "manifest.json is not a Loom checkpoint's (format 'something', expected 'loom-checkpoint')");
  CHECK(precheck_checkpoint(with_manifest("array", "[1, 2]")) ==
        "manifest.json is not a Loom checkpoint's (format missing, expected 'loom-checkpoint')");
  // A manifest of Loom's without a format key (older checkpoints) is still judged by its files.
  CHECK(precheck_checkpoint(with_manifest("old", "{\"files\": []}")) == "manifest.json does not list model.h5");
}
