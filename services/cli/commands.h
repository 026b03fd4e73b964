// Subcommands of the `floe` CLI. Each parses its own arguments (argv[0] is
// the subcommand name) and returns the process exit code.
#pragma once

namespace floe {

int RunLocal(int argc, char** argv);
int RunGenerate(int argc, char** argv);
int RunTokenize(int argc, char** argv);
int RunDetokenize(int argc, char** argv);
int RunMakeModel(int argc, char** argv);
int RunBench(int argc, char** argv);
int RunPlan(int argc, char** argv);

}  // namespace floe
