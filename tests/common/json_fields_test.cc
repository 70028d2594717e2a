// The one JSON field reader (common/json_fields.h): a missing field, a value of the wrong type
// and one out of a type's range are each one line naming the field by its path; the first
// problem is kept and later reads are zero values.
#include "common/json_fields.h"

#include <gtest/gtest.h>

namespace headroom {
namespace {

using nlohmann::json;

// The message of reading `read` from `doc` in "d.json".
template <class Read>
std::string ProblemOf(const json& doc, Read read) {
  JsonFields fields("d.json");
  JsonObject o = fields.Root(doc);
  read(o);
  return fields.message();
}

TEST(JsonFields, ReadsEachTypeAndSaysNothingWhenAllIsWell) {
  const json doc = json::parse(R"({"w": 2.5, "n": -3, "u": 18446744073709551615, "s": "x",
      "b": true, "o": {"k": 1}, "xs": [1, 2.5], "ss": ["a"], "is": [1, 2],
      "os": [{"t": 1}, {"t": 2}]})");
  JsonFields fields("d.json");
  JsonObject o = fields.Root(doc);
  EXPECT_EQ(o.Number("w"), 2.5);
  EXPECT_EQ(o.Int64("n"), -3);
  EXPECT_EQ(o.Integer<uint64_t>("u"), 18446744073709551615ULL);
  EXPECT_EQ(o.String("s"), "x");
  EXPECT_TRUE(o.Bool("b"));
  EXPECT_EQ(o.Object("o").Int64("k"), 1);
  EXPECT_EQ(o.Numbers("xs"), (std::vector<double>{1, 2.5}));
  EXPECT_EQ(o.Strings("ss"), (std::vector<std::string>{"a"}));
  EXPECT_EQ(o.Integers<int>("is"), (std::vector<int>{1, 2}));
  const auto os = o.Objects("os");
  ASSERT_EQ(os.size(), 2u);
  EXPECT_EQ(os[1].path(), "os[1]");
  EXPECT_TRUE(o.Has("w"));
  EXPECT_FALSE(o.Has("nothing"));
  EXPECT_TRUE(fields.ok());
  EXPECT_TRUE(fields.status().ok());
}

TEST(JsonFields, AMissingFieldIsOneLineNamingIt) {
  EXPECT_EQ(ProblemOf(json::object(), [](JsonObject& o) { o.Number("budget_w"); }),
            "d.json: field 'budget_w': missing");
  // Nested: named by its path.
  EXPECT_EQ(ProblemOf(json::parse(R"({"actor": {}})"),
                      [](JsonObject& o) { o.Object("actor").Numbers("parameters"); }),
            "d.json: field 'actor.parameters': missing");
  EXPECT_EQ(ProblemOf(json::parse(R"({"envelopes": [{"budget_w": 1}, {}]})"),
                      [](JsonObject& o) {
                        for (JsonObject e : o.Objects("envelopes")) e.Number("budget_w");
                      }),
            "d.json: field 'envelopes[1].budget_w': missing");
}

TEST(JsonFields, AValueOfTheWrongTypeIsOneLineNamingTheField) {
  const json doc = json::parse(
      R"({"n": "3", "i": 2.5, "s": 4, "b": 1, "o": [], "a": {}, "xs": [1, "2"], "nul": null})");
  const auto problem = [&doc](auto read) { return ProblemOf(doc, read); };
  EXPECT_EQ(problem([](JsonObject& o) { o.Number("n"); }), "d.json: field 'n': expected a number");
  EXPECT_EQ(problem([](JsonObject& o) { o.Int64("i"); }), "d.json: field 'i': expected an integer");
  EXPECT_EQ(problem([](JsonObject& o) { o.String("s"); }), "d.json: field 's': expected a string");
  EXPECT_EQ(problem([](JsonObject& o) { o.Bool("b"); }),
            "d.json: field 'b': expected true or false");
  EXPECT_EQ(problem([](JsonObject& o) { o.Object("o"); }), "d.json: field 'o': expected an object");
  EXPECT_EQ(problem([](JsonObject& o) { o.Array("a"); }), "d.json: field 'a': expected an array");
  EXPECT_EQ(problem([](JsonObject& o) { o.Numbers("xs"); }),
            "d.json: field 'xs': expected an array of numbers");
  EXPECT_EQ(problem([](JsonObject& o) { o.Integers<int>("xs"); }),
            "d.json: field 'xs': expected an array of integers");
  EXPECT_EQ(problem([](JsonObject& o) { o.Strings("s"); }),
            "d.json: field 's': expected an array of strings");  // not an array at all
  EXPECT_EQ(problem([](JsonObject& o) { o.Objects("xs"); }),
            "d.json: field 'xs': expected an array of objects");
  EXPECT_EQ(problem([](JsonObject& o) { o.Number("nul"); }),
            "d.json: field 'nul': expected a number");  // null is not a number
  // The document itself not an object.
  EXPECT_EQ(ProblemOf(json::array(), [](JsonObject& o) { o.Number("x"); }),
            "d.json: expected an object");
}

TEST(JsonFields, AnIntegerOutOfItsTypesRangeIsOneLineNamingTheField) {
  const json doc = json::parse(R"({"big": 3000000000, "neg": -1, "huge": 18446744073709551615})");
  const auto problem = [&doc](auto read) { return ProblemOf(doc, read); };
  EXPECT_EQ(problem([](JsonObject& o) { o.Integer<int>("big"); }),
            "d.json: field 'big': expected an integer");
  EXPECT_EQ(problem([](JsonObject& o) { o.Integer<uint64_t>("neg"); }),
            "d.json: field 'neg': expected an integer >= 0");
  EXPECT_EQ(problem([](JsonObject& o) { o.Int64("huge"); }),
            "d.json: field 'huge': expected an integer");
  // A range of the caller's own, said the same way.
  EXPECT_EQ(problem([](JsonObject& o) {
              if (o.Int64("neg") < 0) o.Fail("neg", "expected watts >= 0");
            }),
            "d.json: field 'neg': expected watts >= 0");
}

TEST(JsonFields, TheFirstProblemIsKeptAndLaterReadsAreZero) {
  const json doc = json::parse(R"({"a": "x", "b": 5})");
  JsonFields fields("d.json");
  JsonObject o = fields.Root(doc);
  EXPECT_EQ(o.Number("a"), 0.0);
  EXPECT_EQ(o.Int64("b"), 0);  // there, but read after a problem
  EXPECT_EQ(o.String("missing"), "");
  o.Fail("b", "another problem");
  EXPECT_FALSE(fields.ok());
  EXPECT_EQ(fields.problem(), "field 'a': expected a number");
  const Status st = fields.status();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().kind(), ErrorKind::kInput);
  EXPECT_EQ(st.error().message(), "d.json: field 'a': expected a number");
  EXPECT_EQ(fields.status(ErrorKind::kIo).error().kind(), ErrorKind::kIo);
}

TEST(JsonFields, MissingAsZeroAndTheNounOfTheDocument) {
  // etcd's gateway leaves zero-valued fields out and may write null: both read as zero.
  JsonFields zero("", JsonFields::Missing::kZero);
  const json doc = json::parse(R"({"n": null, "o": {"k": 2}})");
  JsonObject o = zero.Root(doc);
  EXPECT_EQ(o.Int64("absent"), 0);
  EXPECT_EQ(o.Number("n"), 0.0);
  EXPECT_EQ(o.Object("absent").Int64("k"), 0);
  EXPECT_TRUE(o.Array("absent").empty());
  EXPECT_TRUE(zero.ok());
  EXPECT_EQ(o.Object("o").String("k"), "");
  EXPECT_EQ(zero.message(), "field 'o.k': expected a string");  // no WHERE: the problem alone

  // Policy files call their fields keys.
  JsonFields keys("p.json", JsonFields::Missing::kProblem, "key");
  keys.Root(json::object()).Strings("features");
  EXPECT_EQ(keys.message(), "p.json: key 'features': missing");
}

}  // namespace
}  // namespace headroom
