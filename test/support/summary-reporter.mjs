/**
 * Jest reporter that ends the run with one plain line, `tests: N passed, N failed, N skipped`,
 * which CI tooling reads to count tests whatever the runner.
 */
export default class SummaryReporter {
  onRunComplete(_contexts, results) {
    const skipped = results.numPendingTests + results.numTodoTests;
    process.stdout.write(
      `\ntests: ${results.numPassedTests} passed, ${results.numFailedTests} failed, ${skipped} skipped\n`,
    );
  }
}
