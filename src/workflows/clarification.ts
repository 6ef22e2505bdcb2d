import { badRequest } from '../errors.js';

/**
 * The user's answer to a `clarification_request`, checked against the
 * question it answers: a yes/no question takes yes or no, a multiple-choice
 * one one of its options (as the question spelled it), free text anything
 * not blank. A wrong answer is the user's to fix, so it is a 400 naming
 * what would do, never a guess passed on to the model.
 */
export function checkAnswer(question: Record<string, unknown>, answer: string): string {
  const given = answer.trim();
  if (given === '') throw invalid('answer_blank', 'The answer is blank');
  switch (question.question_type) {
    case 'yes_no': {
      const normalised = given.toLowerCase();
      if (normalised === 'yes' || normalised === 'no') return normalised;
      throw invalid('answer_not_yes_no', 'The question is a yes/no question: answer "yes" or "no"');
    }
    case 'multiple_choice': {
      const options = Array.isArray(question.options)
        ? question.options.filter((option): option is string => typeof option === 'string')
        : [];
      const chosen = options.find((option) => option.toLowerCase() === given.toLowerCase());
      if (chosen !== undefined) return chosen;
      throw invalid(
        'answer_not_an_option',
        `The answer must be one of the question's options: ${options.map((option) => JSON.stringify(option)).join(', ')}`,
      );
    }
    default:
      return given;
  }
}

function invalid(code: string, message: string) {
  return badRequest(code, message, [{ field: 'body.answer', message }]);
}
