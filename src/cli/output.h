// Output helpers shared by the commands: aligned human tables and number formatting.
#pragma once

#include <string>
#include <vector>

namespace lowbit::cli {

// Prints rows as an aligned table with a header rule; numeric-looking cells are right-aligned.
void PrintTable(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);

std::string FormatNumber(double v, int precision = 4);  // "-" for NaN, "inf" for infinity

}  // namespace lowbit::cli
