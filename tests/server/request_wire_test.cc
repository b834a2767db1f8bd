#include "server/request_wire.h"
#include "server/access_control.h"

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include "tpserve/internal/generate_request_bytes.pb.h"

namespace tpserve {
namespace {

using google::protobuf::FieldDescriptor;

// The lenient message must read every field of the public one: same numbers, names, labels and
// oneofs, with `string` read as `bytes`. A field added to tpserve.proto alone fails here.
TEST(RequestWire, LenientMessageMatchesThePublicOneFieldByField) {
  const auto* strict = v1::GenerateRequest::descriptor();
  const auto* lenient = internal::GenerateRequestBytes::descriptor();
  ASSERT_EQ(lenient->field_count(), strict->field_count());
  for (int i = 0; i < strict->field_count(); ++i) {
    const FieldDescriptor* s = strict->field(i);
    const FieldDescriptor* l = lenient->FindFieldByNumber(s->number());
    ASSERT_NE(l, nullptr) << s->name();
    EXPECT_EQ(l->name(), s->name());
    EXPECT_EQ(l->is_repeated(), s->is_repeated()) << s->name();
    EXPECT_EQ(l->containing_oneof() != nullptr, s->containing_oneof() != nullptr) << s->name();
    const auto expected = s->type() == FieldDescriptor::TYPE_STRING ? FieldDescriptor::TYPE_BYTES : s->type();
    EXPECT_EQ(l->type(), expected) << s->name();
    if (s->type() == FieldDescriptor::TYPE_MESSAGE) {
      EXPECT_EQ(l->message_type(), s->message_type()) << s->name();
    }
  }
}

std::string Wire(const internal::GenerateRequestBytes& request) { return request.SerializeAsString(); }

TEST(RequestWire, AValidRequestReadsAsThePublicMessage) {
  v1::GenerateRequest request;
  request.set_request_id("id-1");
  request.set_text("Grüße, 世界");
  request.set_max_tokens(9);
  request.add_stop("\n\n");
  request.mutable_sampling()->set_temperature(0.5f);
  request.add_stop_token_ids(7);
  auto parsed = ParseGenerateRequest(request.SerializeAsString(), 1 << 20);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*parsed, request));
}

TEST(RequestWire, InvalidUtf8IsNamedByFieldAndByte) {
  struct Case {
    std::function<void(internal::GenerateRequestBytes&)> set;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](auto& r) { r.set_text("ab\xC3\x28"); }, "prompt: text is not valid UTF-8 (byte 2 of 4)"},
      {[](auto& r) { r.set_request_id("\xFF"); }, "request_id is not valid UTF-8 (byte 0 of 1)"},
      {[](auto& r) { r.add_stop("ok"); r.add_stop("x\xED\xA0\x80"); }, "stop[1] is not valid UTF-8 (byte 1"},
  };
  for (const Case& c : cases) {
    internal::GenerateRequestBytes request;
    request.set_max_tokens(1);
    c.set(request);
    auto parsed = ParseGenerateRequest(Wire(request), 1 << 20);
    ASSERT_FALSE(parsed.ok()) << c.message;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find(c.message), std::string::npos) << parsed.status().message();
  }
}

TEST(RequestWire, OversizedAndMalformedRequestsAreRefusedWithTheirSizes) {
  internal::GenerateRequestBytes request;
  request.set_text(std::string(300, 'a'));
  auto over = ParseGenerateRequest(Wire(request), 256);
  EXPECT_EQ(over.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(over.status().message().find("larger than the server's limit of 256"), std::string::npos);
  auto garbage = ParseGenerateRequest(std::string("\x0a\xff\xff\xff\xff\x0f", 6), 256);
  EXPECT_EQ(garbage.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(garbage.status().message().find("not a tpserve.v1.GenerateRequest"), std::string::npos)
      << garbage.status().message();
}

}  // namespace
}  // namespace tpserve

namespace tpserve {
namespace {

TEST(AccessControl, ConstantTimeEqualsIsEqualityOnEveryLengthAndByte) {
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_TRUE(ConstantTimeEquals("key-123", "key-123"));
  EXPECT_FALSE(ConstantTimeEquals("key-123", "key-124"));
  EXPECT_FALSE(ConstantTimeEquals("key-123", "key-12"));
  EXPECT_FALSE(ConstantTimeEquals("key-12", "key-123"));
  EXPECT_FALSE(ConstantTimeEquals("", "a"));
  EXPECT_FALSE(ConstantTimeEquals(std::string("a\0b", 3), std::string("a\0c", 3)));
  EXPECT_FALSE(ConstantTimeEquals(std::string("ab\0", 3), "ab"));  // a shorter key is not a prefix match
}

TEST(AccessControl, NoKeyConfiguredLetsEveryoneIn) {
  auto open = AccessControl::Create({});
  ASSERT_TRUE(open.ok());
  EXPECT_FALSE(open->requires_key());
  EXPECT_TRUE(open->CheckAuthorization("").ok());
  EXPECT_FALSE(open->tls());
  EXPECT_FALSE(AccessControl::Create({.tls_cert = "a.pem"}).ok());  // without --tls-key
  EXPECT_FALSE(AccessControl::Create({.tls_client_ca = "ca.pem"}).ok());  // without TLS
}

}  // namespace
}  // namespace tpserve
