// Settings that name one of a few choices are parsed once into enums. Each enum lists its
// names in one table, `Choices<E>::all`, next to its declaration; the configuration binding,
// error messages and printing all read that table, so nothing compares setting strings while
// a run goes on.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace diloco {

/// Specialised beside each enum: `static constexpr std::pair<E, std::string_view> all[] = {...};`
template <class E>
struct Choices;

/// The name of a choice ("decoupled").
template <class E>
constexpr std::string_view name_of(E e) {
  for (const auto& [v, n] : Choices<E>::all)
    if (v == e) return n;
  return "?";
}

/// The choice a name stands for, if any.
template <class E>
constexpr std::optional<E> choice_of(std::string_view s) {
  for (const auto& [v, n] : Choices<E>::all)
    if (n == s) return v;
  return std::nullopt;
}

/// Every name, quoted, for messages: "\"a\", \"b\" or \"c\"".
template <class E>
std::string choice_list() {
  std::string out;
  const auto n = std::size(Choices<E>::all);
  for (std::size_t i = 0; i < n; ++i)
    out += (i == 0 ? "" : i + 1 == n ? " or " : ", ") + ("\"" + std::string(Choices<E>::all[i].second) + "\"");
  return out;
}

}  // namespace diloco
